package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// writer is the journal's one goroutine: it takes everything queued, writes
// it in one transaction, commits, and wakes the settlements waiting for it.
func (s *Store) writer() {
	defer close(s.stopped)
	ctx := context.Background()
	w, err := newJournalWriter(ctx, s.db)
	if err != nil {
		s.fail(err, nil)
		return
	}
	defer w.close()
	g := newGroup()
	var ops []op
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	for {
		s.mu.Lock()
		for len(s.pending) == 0 && !s.closing {
			s.idle = true
			s.mu.Unlock()
			<-s.wake
			s.mu.Lock()
		}
		s.idle = false
		if len(s.pending) == 0 {
			s.mu.Unlock()
			return
		}
		// Admissions alone may wait a moment for their settlements, so that
		// a short call is written once; a settlement is written at once.
		if s.groupDelay > 0 && !s.settling && !s.closing {
			hold.Reset(s.groupDelay)
			for waiting := true; waiting && !s.settling && !s.closing; {
				s.mu.Unlock()
				select {
				case <-s.wake:
				case <-hold.C:
					waiting = false
				}
				s.mu.Lock()
			}
			hold.Stop()
		}
		ops, s.pending = s.pending, ops[:0]
		s.settling = false
		upto := s.queued
		s.mu.Unlock()

		g.reset()
		for i := range ops {
			g.add(&ops[i])
		}
		err := w.commit(ctx, g)
		if err != nil {
			s.fail(err, ops)
			return
		}
		s.mu.Lock()
		s.done = upto
		s.committed.Broadcast()
		s.mu.Unlock()
		// The settlements of SettleAsync are told here, on this goroutine,
		// once per group: no goroutine per call waits for the commit.
		for i := range ops {
			if ops[i].done != nil {
				ops[i].done(nil)
			}
		}
		clear(ops)
	}
}

// fail makes the journal's failure sticky and tells the asynchronous
// settlements that will never be committed: those of the failed group
// (taken) and those still pending.
func (s *Store) fail(err error, taken []op) {
	s.mu.Lock()
	s.err = fmt.Errorf("sqlitestore: journal: %w", err)
	s.committed.Broadcast()
	pending := s.pending
	s.pending = nil
	err = s.err
	s.mu.Unlock()
	for _, ops := range [][]op{taken, pending} {
		for i := range ops {
			if ops[i].done != nil {
				ops[i].done(err)
			}
		}
	}
}

// journalWriter holds the writer's connection and prepared statements.
type journalWriter struct {
	conn                     *sql.Conn
	insert, remove, addUsage *sql.Stmt
	begin, commitTx          *sql.Stmt
}

func newJournalWriter(ctx context.Context, db *sql.DB) (*journalWriter, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	w := &journalWriter{conn: conn}
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&w.insert, `INSERT INTO reservations (id, deadline, charges) VALUES (?, ?, ?)`},
		{&w.remove, `DELETE FROM reservations WHERE id = ?`},
		{&w.addUsage, upsertUsage},
		{&w.begin, "BEGIN IMMEDIATE"},
		{&w.commitTx, "COMMIT"},
	} {
		if *p.dst, err = conn.PrepareContext(ctx, p.query); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

func (w *journalWriter) close() {
	for _, st := range []*sql.Stmt{w.insert, w.remove, w.addUsage, w.begin, w.commitTx} {
		if st != nil {
			st.Close()
		}
	}
	w.conn.Close()
}

func (w *journalWriter) commit(ctx context.Context, g *group) (err error) {
	if _, err := w.begin.ExecContext(ctx); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
		}
	}()
	for id, o := range g.opened {
		g.scratch = encodeCharges(g.scratch[:0], o)
		if _, err := w.insert.ExecContext(ctx, int64(id), o.deadline(), g.scratch); err != nil {
			return fmt.Errorf("insert reservation: %w", err)
		}
	}
	for _, id := range g.closed {
		if _, err := w.remove.ExecContext(ctx, int64(id)); err != nil {
			return fmt.Errorf("delete reservation: %w", err)
		}
	}
	for k, d := range g.deltas {
		if _, err := w.addUsage.ExecContext(ctx, int64(k.Rule), k.Subject, k.Period, d.periodEnd, d.used); err != nil {
			return fmt.Errorf("add usage: %w", err)
		}
	}
	if g.forget {
		if _, err := w.conn.ExecContext(ctx, `DELETE FROM recovered`); err != nil {
			return fmt.Errorf("delete recovered reservations: %w", err)
		}
	}
	_, err = w.commitTx.ExecContext(ctx)
	return err
}
