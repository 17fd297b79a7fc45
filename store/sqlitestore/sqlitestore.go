// Package sqlitestore is the embedded durable sluice.Store, the gateway's
// default on one node.
//
// Counters are served from memory (a memstore), so an admission costs what
// it costs in memory; every change to a budget is journaled to SQLite (WAL)
// by one writer goroutine with group commit, off the caller's path:
//
//   - Settle returns only after its journal transaction commits, so no
//     settled usage is lost to a crash (kill -9). With the default
//     synchronous=NORMAL the commit survives a process crash; set
//     Options.Synchronous to "FULL" to survive power loss too.
//   - An admission returns before it is journaled; the writer commits it
//     within one group (normally well under 10 ms). A crash can lose only
//     the reservations of those last milliseconds.
//   - On Open, every budget's usage for the current period is reloaded, and
//     every reservation found open (its process is gone) is settled as the
//     sweep would: charged at the reserved amount, or released when its rule
//     says on_expiry: release.
//   - Rate buckets and concurrency leases are not journaled: buckets restart
//     full, and leases died with the calls of the crashed process.
//
// The database is opened in exclusive locking mode: one process per file.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/counter"
	"github.com/sluicehq/sluice/store/memstore"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver
)

var (
	_ sluice.Store        = (*Store)(nil)
	_ sluice.AsyncSettler = (*Store)(nil)
	_ sluice.LeaseRenewer = (*Store)(nil)
	// an admin.ReservationLister
	_ interface {
		Reservations(context.Context, int) ([]sluice.Batch, error)
	} = (*Store)(nil)
)

var errClosed = errors.New("sqlitestore: closed")

// Options configures a Store. Path is required.
type Options struct {
	// Path is the database file; it is created if missing.
	Path string
	// Synchronous is SQLite's synchronous setting: "NORMAL" (default:
	// durable against process crashes) or "FULL" (against power loss).
	Synchronous string
	// Clock gives the time Open settles leftover reservations at; nil means
	// real time.
	Clock sluice.Clock
	// Memory configures the in-memory counters.
	Memory memstore.Options
	// GroupDelay is how long the journal may hold admissions, waiting for
	// their settlements, so that a short call is written once (as its
	// usage) rather than twice (its reservation, then its settlement). A
	// settlement is never held. Default 2 ms; negative disables. It bounds
	// what a crash can lose of the admissions, with the commit's own time.
	GroupDelay time.Duration
	// HoldSettlements lets settlements wait GroupDelay too, so that one
	// transaction carries many calls at low concurrency. Settle still
	// returns only after its commit, GroupDelay later at most: set it when
	// the caller settles off the request's path (the gateway does).
	HoldSettlements bool
	// Logger receives the warning for each counter Open repairs; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Store is a sluice.Store backed by memory and journaled to SQLite. It is
// safe for concurrent use.
type Store struct {
	mem *memstore.Store
	db  *sql.DB

	mu        sync.Mutex
	committed *sync.Cond // signalled after each journal transaction
	pending   []op
	queued    uint64 // ops queued so far
	done      uint64 // ops committed so far
	err       error  // sticky journal failure
	closing   bool
	// settling is set while a settlement waits in pending.
	settling bool
	// idle is set while the writer waits for pending to fill: only then,
	// or to end a hold, does enqueue wake it, so that the calls of a group
	// do not each wake the writer only for it to go back to waiting.
	idle            bool
	groupDelay      time.Duration
	holdSettlements bool
	wake            chan struct{}
	stopped         chan struct{}
	// recovered are the reservations a previous process left open, which
	// Open settled (or an earlier Open did, whose report may not have
	// reached a ledger): the first SweepReport tells of them.
	recovered []sluice.Batch
	// forgetRecovered is set once SweepReport has told of recovered: the
	// next SweepReport deletes their rows (see recoveredTable).
	forgetRecovered bool
	log             *slog.Logger
}

const schema = `
CREATE TABLE IF NOT EXISTS budget_usage (
	rule       INTEGER NOT NULL,
	subject    TEXT    NOT NULL,
	period     INTEGER NOT NULL,
	period_end INTEGER NOT NULL,
	used       INTEGER NOT NULL,
	PRIMARY KEY (rule, subject, period)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reservations (
	id       INTEGER PRIMARY KEY,
	deadline INTEGER NOT NULL,
	charges  BLOB    NOT NULL
);
PRAGMA user_version = 1;
` + recoveredTable

// recoveredTable keeps the charges Open made for the reservations a
// previous process left open until a ledger has been told of them: Open
// charges the budgets and moves the reservations here in one transaction,
// the first SweepReport tells of them, and the next one deletes them (by
// then a caller that records them, as the gateway does, has written its
// ledger). A crash before that tells of them again at the next Open, never
// charging them twice: a crash loop loses none from the ledger.
const recoveredTable = `
CREATE TABLE IF NOT EXISTS recovered (
	id      INTEGER PRIMARY KEY,
	charges BLOB    NOT NULL
);
`

// Open opens (or creates) the store at opts.Path, reloads the current
// periods' budget usage and settles the reservations a previous process
// left open.
func Open(opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, errors.New("sqlitestore: open: Options.Path is required")
	}
	syncMode := opts.Synchronous
	switch syncMode {
	case "":
		syncMode = "NORMAL"
	case "NORMAL", "FULL":
	default:
		return nil, fmt.Errorf("sqlitestore: open: synchronous must be NORMAL or FULL, not %q", syncMode)
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+syncMode+")")
	q.Add("_pragma", "locking_mode(EXCLUSIVE)")
	q.Add("_pragma", "busy_timeout(1000)")
	db, err := sql.Open("sqlite", "file:"+opts.Path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", opts.Path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &Store{mem: memstore.New(opts.Memory), db: db, wake: make(chan struct{}, 1), stopped: make(chan struct{}),
		groupDelay: opts.GroupDelay, holdSettlements: opts.HoldSettlements, log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.groupDelay == 0 {
		s.groupDelay = 2 * time.Millisecond
	}
	s.committed = sync.NewCond(&s.mu)
	clock := opts.Clock
	now := time.Now()
	if clock != nil {
		now = clock.Now()
	}
	if err := s.recover(now); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", opts.Path, err)
	}
	go s.writer()
	return s, nil
}

// recover creates the schema, settles leftover reservations and reloads
// the usage of every period that has not ended.
func (s *Store) recover(now time.Time) error {
	ctx := context.Background()
	if _, err := s.db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.repair(ctx, tx); err != nil {
		return fmt.Errorf("repair usage: %w", err)
	}
	// Charged by an earlier Open, not yet told of to a ledger.
	earlier, err := readCharges(ctx, tx, `SELECT id, charges FROM recovered`)
	if err != nil {
		return fmt.Errorf("read recovered reservations: %w", err)
	}
	left, err := readCharges(ctx, tx, `SELECT id, charges FROM reservations`)
	if err != nil {
		return fmt.Errorf("read reservations: %w", err)
	}
	for _, lo := range left {
		for _, c := range lo.charges {
			if c.release {
				continue
			}
			if _, err := tx.ExecContext(ctx, upsertUsage, int64(c.key.Rule), c.key.Subject, c.key.Period, c.periodEnd, counter.Clamp(c.amount)); err != nil {
				return fmt.Errorf("settle leftover reservation %d: %w", lo.id, err)
			}
		}
		// Kept, charged, until a ledger has been told (recoveredTable).
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO recovered (id, charges) SELECT id, charges FROM reservations WHERE id = ?`, lo.id); err != nil {
			return fmt.Errorf("keep leftover reservation %d: %w", lo.id, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM reservations WHERE id = ?`, lo.id); err != nil {
			return err
		}
	}
	for _, lo := range append(earlier, left...) {
		var told sluice.Batch
		for _, c := range lo.charges {
			ec := sluice.Charge{Key: c.key, Kind: sluice.KindBudget}
			if !c.release {
				ec.Actual = c.amount
			}
			told.Charges = append(told.Charges, ec)
		}
		s.recovered = append(s.recovered, told)
	}
	// Finished periods are of no use to the counters; the ledger of record
	// is the catalog's.
	if _, err := tx.ExecContext(ctx, `DELETE FROM budget_usage WHERE period_end <= ?`, now.UnixNano()); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT rule, subject, period, period_end, used FROM budget_usage`)
	if err != nil {
		return fmt.Errorf("read usage: %w", err)
	}
	for rows.Next() {
		var rule, period, end, used int64
		var subject string
		if err := rows.Scan(&rule, &subject, &period, &end, &used); err != nil {
			rows.Close()
			return err
		}
		s.mem.RestoreBudget(sluice.CounterKey{Rule: uint64(rule), Subject: subject, Period: period}, time.Unix(0, end), used)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return tx.Commit()
}

// upsertUsage adds to a budget's usage, saturating at counter.Ceiling: the
// usage added and the usage held are both within [0, Ceiling] (the one
// clamped by the caller, the other repaired on Open), so their sum is an
// INTEGER well below 2^63, which SQLite would otherwise turn into a REAL.
var upsertUsage = `INSERT INTO budget_usage (rule, subject, period, period_end, used) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (rule, subject, period) DO UPDATE SET used = min(used + excluded.used, ` + strconv.FormatInt(counter.Ceiling, 10) + `)`

// Admit admits in memory and queues the reservation for the journal, a
// copy of it: the batch is the caller's.
func (s *Store) Admit(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	if err := s.failed(); err != nil {
		return false, err
	}
	ok, err := s.mem.Admit(ctx, now, b, results)
	if ok && err == nil && hasBudget(b) {
		b.Charges = slices.Clone(b.Charges)
		s.enqueue(op{kind: opAdmit, batch: &b})
	}
	return ok, err
}

// Settle settles in memory and returns once the settlement is committed.
func (s *Store) Settle(ctx context.Context, now time.Time, b sluice.Batch) error {
	if err := s.failed(); err != nil {
		return err
	}
	if !hasBudget(b) {
		return s.mem.Settle(ctx, now, b)
	}
	// The memstore ignores a batch the sweep already took; so must the
	// journal, or the usage would be written twice.
	applied, err := s.mem.SettleOpen(now, b)
	if err != nil || !applied {
		return err
	}
	// Settle returns once the op is committed: the op may point at the
	// caller's batch until then.
	return s.wait(ctx, s.enqueue(op{kind: opSettle, batch: &b}))
}

// SettleAsync settles in memory at once and calls done once the settlement
// is committed, from the journal's goroutine: the caller does not wait for
// the commit, and no goroutine waits for it per call. The journal is given
// a copy of the batch, which is the caller's.
func (s *Store) SettleAsync(ctx context.Context, now time.Time, b sluice.Batch, done func(error)) {
	if err := s.failed(); err != nil {
		done(err)
		return
	}
	if !hasBudget(b) {
		done(s.mem.Settle(ctx, now, b))
		return
	}
	applied, err := s.mem.SettleOpen(now, b)
	if err != nil || !applied {
		done(err)
		return
	}
	b.Charges = slices.Clone(b.Charges)
	s.enqueue(op{kind: opSettle, batch: &b, done: done})
}

// Reserved reads the in-memory counters: this process is the only one
// serving them.
func (s *Store) Reserved(ctx context.Context, keys []sluice.CounterKey) ([]int64, error) {
	return s.mem.Reserved(ctx, keys)
}

// Reservations lists the open reservations in memory: this process admitted
// every one (those of a crashed process were settled by Open).
func (s *Store) Reservations(ctx context.Context, limit int) ([]sluice.Batch, error) {
	return s.mem.Reservations(ctx, limit)
}

// Peek reads the in-memory counters.
func (s *Store) Peek(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) error {
	return s.mem.Peek(ctx, now, b, results)
}

// Sweep settles expired reservations in memory and journals them.
func (s *Store) Sweep(ctx context.Context, now time.Time) (sluice.SweepResult, error) {
	res, _, err := s.SweepReport(ctx, now)
	return res, err
}

// SweepReport is Sweep, and tells what it settled once that is journaled.
// The first call also tells of the reservations a previous process left
// open, which Open settled (charged whole, as the sweep would have), so
// that they reach a ledger too; they are told of again after a restart
// until a second call (see recoveredTable).
func (s *Store) SweepReport(ctx context.Context, now time.Time) (sluice.SweepResult, []sluice.Batch, error) {
	if err := s.failed(); err != nil {
		return sluice.SweepResult{}, nil, err
	}
	s.mu.Lock()
	told, forget := s.recovered, s.forgetRecovered
	s.recovered, s.forgetRecovered = nil, len(s.recovered) > 0
	s.mu.Unlock()
	var last uint64
	if forget {
		// Told of at the last report, whose caller has recorded them since.
		last = s.enqueue(op{kind: opForget})
	}
	// The memstore's own copies of the batches, each charge's Actual what
	// it was settled at.
	swept, res := s.mem.SweepExpired(now)
	for i := range swept {
		last = s.enqueue(op{kind: opSettle, batch: &swept[i]})
	}
	if last > 0 {
		s.flushNow()
		if err := s.wait(ctx, last); err != nil {
			return res, told, err
		}
	}
	return res, append(told, swept...), nil
}

func hasBudget(b sluice.Batch) bool {
	for i := range b.Charges {
		if b.Charges[i].Kind == sluice.KindBudget {
			return true
		}
	}
	return false
}

func (s *Store) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errClosed
	}
	return s.err
}

// enqueue adds o to the next journal group and returns its sequence number.
func (s *Store) enqueue(o op) uint64 {
	s.mu.Lock()
	if o.done != nil && (s.closing || s.err != nil) {
		// The writer may be gone: the op would never be committed.
		err := s.err
		if err == nil {
			err = errClosed
		}
		s.mu.Unlock()
		o.done(err)
		return 0
	}
	s.pending = append(s.pending, o)
	endsHold := o.kind == opSettle && !s.holdSettlements
	if endsHold {
		s.settling = true
	}
	wake := s.idle || endsHold
	s.idle = false
	s.queued++
	seq := s.queued
	s.mu.Unlock()
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return seq
}

// flushNow ends any hold: what is pending is written at once.
func (s *Store) flushNow() {
	s.mu.Lock()
	s.settling = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wait blocks until op seq is committed or the journal fails. It does not
// give up on ctx: a settlement that was applied in memory must reach the
// journal before its caller is told it is settled.
func (s *Store) wait(_ context.Context, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.done < seq && s.err == nil {
		s.committed.Wait()
	}
	if s.done < seq {
		return s.err
	}
	return nil
}

// Close commits what is queued and closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.stopped
	return s.db.Close()
}

// RenewLeases renews in memory. Deadlines are not journaled: Open settles
// every reservation a previous process left open, whatever its deadline.
func (s *Store) RenewLeases(ctx context.Context, now time.Time, renewals []sluice.Batch) error {
	if err := s.failed(); err != nil {
		return err
	}
	return s.mem.RenewLeases(ctx, now, renewals)
}
