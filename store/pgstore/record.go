package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A Recorder writes records of settlements in the transaction that applies
// them, so that a record and its settlement commit or roll back together:
// a usage ledger in the same database as the counters (Options.Recorder).
// It is safe for concurrent use.
type Recorder interface {
	// QueueRecords queues, with queue, the statements that write recs:
	// the records (given to WithRecord) of the settlements of one group
	// call that were applied, in that call's transaction. It only builds
	// statements; the store runs them. An error fails the whole group.
	QueueRecords(recs []any, queue func(sql string, args ...any)) error
}

// record is a record on its way from WithRecord to the Recorder.
type record struct {
	value any
	taken atomic.Bool
}

type recordKey struct{}

// WithRecord returns ctx carrying rec to the Settle it is passed to, and a
// function that reports whether that Settle (or a retry of it with the same
// context) took rec. With Options.Recorder set, a Settle that succeeds
// takes rec: it wrote rec in the settlement's transaction, or dropped it
// because the batch had been settled already or swept, which writes no
// second record. A settlement that fails rolls rec back with it, untaken.
// Not taken after a Settle that succeeded (a store without a Recorder, a
// reservation the engine settled without the store), rec is the caller's
// to record some other way.
func WithRecord(ctx context.Context, rec any) (context.Context, func() bool) {
	r := &record{value: rec}
	return context.WithValue(ctx, recordKey{}, r), r.taken.Load
}

// recordOf returns the record ctx carries to a store with a Recorder, or
// nil.
func (s *Store) recordOf(ctx context.Context) *record {
	if s.recorder == nil {
		return nil
	}
	r, _ := ctx.Value(recordKey{}).(*record)
	return r
}

// applyRecorded is apply's call for a group whose settlements carry
// records: the group's sluice_apply and the records of the settlements it
// applied, in one transaction. Which settlements applied is known only
// from sluice_apply's result, so it takes two round trips: BEGIN and the
// call, then the records' statements and COMMIT.
func (s *Store) applyRecorded(ctx context.Context, g []*op, a *groupArgs) (err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if c := conn.Conn(); err != nil && !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
			// Rolled back now, rather than when the pool closes the
			// connection, so the rows it locked are free before the
			// callers retry.
			_, _ = c.Exec(ctx, "rollback")
		}
		conn.Release() // closes a connection still in a transaction
	}()
	call := &pgx.Batch{}
	call.Queue("begin")
	call.Queue(applySQL, a.values()...).QueryRow(func(row pgx.Row) error { return a.scan(row) })
	if err := conn.SendBatch(ctx, call).Close(); err != nil {
		return err
	}
	if len(a.done) != len(g) {
		return fmt.Errorf("sluice_apply returned %d results for %d operations", len(a.done), len(g))
	}
	var recs []any
	for i, o := range g {
		if o.rec != nil && a.done[i] {
			recs = append(recs, o.rec.value)
		}
	}
	write := &pgx.Batch{}
	if len(recs) > 0 {
		if err := s.recorder.QueueRecords(recs, func(sql string, args ...any) { write.Queue(sql, args...) }); err != nil {
			return &recordError{fmt.Errorf("queue records: %w", err)}
		}
	}
	write.Queue("commit")
	if err := conn.SendBatch(ctx, write).Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server refused a record or the commit: nothing of the
			// group committed.
			return &recordError{fmt.Errorf("write records: %w", err)}
		}
		return fmt.Errorf("write records: %w", err)
	}
	for _, o := range g {
		if o.rec != nil {
			o.rec.taken.Store(true)
		}
	}
	return nil
}

// recordError is a failure to write a group's records that committed
// nothing: the group's operations are run again one by one, so that an
// admission does not fail for a record it does not carry.
type recordError struct{ err error }

func (e *recordError) Error() string { return e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }
