// Package pgstore is the sluice.Store over PostgreSQL, for several gateway
// replicas sharing counters and reservations durably.
//
// # One call per group of admissions and settlements
//
// Admit and Settle are group-committed. A call that finds no other call of
// the Store running is sent at once, alone, so a caller without company
// waits for nothing; calls that arrive while one is running queue, and when
// it ends all of them (up to 64) go as the next call: one PL/pgSQL function
// call (sluice_apply, in migrations/0002_group.sql), one transaction, one
// commit. Settlements go first in a group (no operation of a group waits
// for another, so any order is a serial order). The function takes the
// settlements' reservation rows in batch order, then creates or locks every
// counter of the group in one statement in key order, evaluates each
// operation in turn on the rows in memory (an admission checks all its
// charges and applies all or none; a refused one changes nothing), and
// writes each counter once. Counter rows are taken in one global key order
// by every transaction, which is why concurrent groups, sweeps and replicas
// never deadlock (the lock rules are written at the top of the migrations).
//
// A call that fails reaches every operation in it as an error (the engine's
// sluice.StoreError); one that the server refused for one operation's data
// (an overflow: SQLSTATE class 22 or 23) committed nothing, and its
// operations are run again one by one, so that one fails alone. A caller
// whose context ends while its operation is queued leaves the queue,
// uncharged; once sent, its outcome is unknown to it, as for any call cut
// short.
//
// BenchmarkAdmitSettle, three rules (two calls and seven row writes per
// request when alone), 32 callers on distinct subjects: 16 operations per
// call, about 200 µs of server CPU per request instead of 670, 0.7x the
// throughput of a plain one-row UPDATE in the same run (0.16x to 0.18x one
// call per operation); on one hot subject 1.0x, as a group writes each of
// the subject's rows once. Two calls in flight at once instead of one made
// groups of 10 and cost more CPU per operation.
//
// Why a function rather than statements sent from Go: BenchmarkAdmitStrategy
// runs the same Admit+Settle of three rules as a pipelined two-round-trip
// transaction of plain statements, the arithmetic in Go (stmtStore, in
// strategy_test.go). Medians of three runs before group commit, with
// 0001's one-call-per-operation functions, 32 callers, 2-core machine shared
// with other work, ops/s function vs statements:
//
//	loopback, distinct subjects:     2188 vs 1989 (server CPU/op 455 vs 438 µs)
//	loopback, one hot subject:       1010 vs  753
//	250 µs each way, distinct:       1139 vs  940
//	250 µs each way, one hot subject: 798 vs  154
//
// On loopback the two cost about the same: PL/pgSQL spends on expressions what
// the statements spend on messages. Across a network the function wins, and
// on a hot subject by 5x: the statements hold the subject's rows locked from
// the first round trip to the COMMIT of the second, while the function holds
// them only while it runs. Reproduce with
//
//	SLUICE_TEST_POSTGRES_URL=postgres://... go test -run '^$' -bench AdmitStrategy -benchtime 3s ./store/pgstore
//
// (the function side now group-commits; the statements side does not).
//
// # Semantics
//
// Results are store/memstore's, exactly (TestDifferential_SameResultsAsMemstore
// compares them on random operations): rate buckets keep memstore's state,
// the time the bucket is full again plus a fraction of a nanosecond, and the
// limit it was drawn at, with numeric arithmetic in SQL that never rounds;
// budgets count settled plus reserved usage; concurrency leases are rows with
// an expiry, pruned when their key is next admitted and by the sweep.
// RenewLeases moves reservation deadlines and lease expiries later, never
// back, in one statement that waits for no lock.
//
// Time is the database's (clock_timestamp() when a call starts, one for a
// whole group), so replicas with skewed clocks share one timeline; a lease
// or a reservation expires at the database's now plus the batch's timeout.
// Budget periods are chosen by the engine's clock. Options.PinTime makes the
// store use each caller's now instead, for tests that drive a manual clock.
//
// Settle of a batch with a budget charge deletes the batch's reservation row
// first and does nothing when it is gone, so settling twice (in one group
// too), or after the sweep, charges once. A batch without budget charges keeps no row; the
// engine settles a Reservation once.
//
// # Durability and failures
//
// A settlement returns after its group's commit, so a kill -9 of a replica loses no
// settled usage; its open reservations are settled by the sweep of any
// replica (any number may sweep at once: each reservation is taken by one,
// with SKIP LOCKED) and its leases free themselves at expiry. Every call is
// bounded by Options.Timeout, on the client (context) and on the server
// (statement_timeout); an unreachable server fails each call with an error
// the engine reports as sluice.StoreError, and the pool reconnects by itself
// when the server is back. An admission that times out on the client after
// the server committed it stays reserved until the sweep charges it: fail
// closed.
//
// The sweep also deletes expired leases and counters idle for ten minutes,
// reading a bounded slice of the table each time, so storage follows the
// subjects seen lately.
//
// # Records written with the settlements
//
// With Options.Recorder, a settlement may carry a record (WithRecord): the
// row of a usage ledger in the same database, say. A group with such a
// settlement runs in an explicit transaction, BEGIN and sluice_apply in one
// round trip, then the Recorder's statements for the settlements that
// applied and COMMIT in a second, so that each record commits or rolls back
// with its settlement; the record of a batch settled already or swept is
// not written. A group without records is the one call it always was.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
)

var _ sluice.Store = (*Store)(nil)

// Options configures a Store. URL is required; every other zero value is a
// default.
type Options struct {
	// URL is a PostgreSQL connection string
	// (postgres://user:password@host:5432/db?sslmode=disable), with pgx's
	// parameters (pool_max_conns, connect_timeout, ...).
	URL string
	// Schema, if set, is the PostgreSQL schema that holds the store's tables
	// and functions: Open creates it if missing and puts it alone on every
	// connection's search_path. Empty means the connection's own search_path
	// (normally public).
	Schema string
	// Timeout bounds every call to the database, connecting included
	// (default 2 seconds). It is also the server's statement_timeout for the
	// store's connections, unless the URL sets one.
	Timeout time.Duration
	// MaxConns is the pool's size: 0 means pool_max_conns from the URL, or
	// else 4 per CPU.
	MaxConns int32
	// PinTime makes the store decide at the now its caller passes instead of
	// the database clock. It exists for tests that drive a manual clock:
	// with several processes their clocks would disagree.
	PinTime bool
	// NoMigrate makes Open refuse a database whose schema is older than this
	// code instead of migrating it, for deployments that run `sluice migrate`
	// as a separate step.
	NoMigrate bool
	// Logger receives the warning for each counter Open repairs; nil means
	// slog.Default().
	Logger *slog.Logger
	// Recorder, if set, writes the records that settlements carry
	// (WithRecord) in the settlements' own transaction. Its statements
	// run on the store's connections: tables they name outside the
	// store's search_path must be qualified by their schema.
	Recorder Recorder
}

// Store is a sluice.Store backed by PostgreSQL. It is safe for concurrent
// use, by any number of processes sharing the database.
type Store struct {
	pool     *pgxpool.Pool
	timeout  time.Duration
	pinTime  bool
	log      *slog.Logger
	recorder Recorder
	queue    queue
	stats    struct{ calls, ops atomic.Int64 }
	// cancels are the releases of admissions whose callers gave up (see
	// cancelLater); closing ends them.
	cancels        sync.WaitGroup
	pendingCancels atomic.Int64
	closing        chan struct{}
	closeOnce      sync.Once
	// testHookExec, if set, is called before each group call with its
	// number of operations.
	testHookExec func(ops int)
}

// openTimeout bounds Open when its context has no deadline: migrating may
// wait for another replica's migration.
const openTimeout = time.Minute

// Open connects to opts.URL, migrates the schema (or, with NoMigrate, checks
// it) and returns the Store. A database migrated by newer code is refused.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.URL == "" {
		return nil, errors.New("pgstore: open: Options.URL is required")
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	s := &Store{timeout: opts.Timeout, pinTime: opts.PinTime, closing: make(chan struct{}), log: opts.Logger, recorder: opts.Recorder}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.timeout <= 0 {
		s.timeout = 2 * time.Second
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	} else if !strings.Contains(opts.URL, "pool_max_conns") {
		cfg.MaxConns = int32(4 * runtime.GOMAXPROCS(0))
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 || cfg.ConnConfig.ConnectTimeout > s.timeout {
		// Without it, a connection attempt to a server that accepts and
		// never answers would hold a pool slot forever.
		cfg.ConnConfig.ConnectTimeout = s.timeout
	}
	params := cfg.ConnConfig.RuntimeParams
	if _, set := params["statement_timeout"]; !set {
		params["statement_timeout"] = strconv.FormatInt(s.timeout.Milliseconds(), 10)
	}
	if opts.Schema != "" {
		params["search_path"] = pgx.Identifier{opts.Schema}.Sanitize()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, openTimeout)
		defer cancel()
	}
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	if err := s.prepare(ctx, opts); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) prepare(ctx context.Context, opts Options) error {
	if opts.Schema != "" {
		if err := createSchema(ctx, s.pool, opts.Schema); err != nil {
			return fmt.Errorf("pgstore: open: %w", err)
		}
	}
	if opts.NoMigrate {
		if err := checkSchema(ctx, s.pool); err != nil {
			return fmt.Errorf("pgstore: open: check schema: %w", err)
		}
	} else if err := migrateSchema(ctx, s.pool); err != nil {
		return fmt.Errorf("pgstore: open: migrate: %w", err)
	}
	if err := s.repair(ctx); err != nil {
		return fmt.Errorf("pgstore: open: repair counters: %w", err)
	}
	return nil
}

// Ping reports whether the database answers, within the store's timeout:
// for a readiness check.
func (s *Store) Ping(ctx context.Context) error {
	return s.call(ctx, func(ctx context.Context) error {
		if err := s.pool.Ping(ctx); err != nil {
			return fmt.Errorf("pgstore: ping: %w", err)
		}
		return nil
	})
}

// Close closes the pool; calls in flight finish first, releases of
// admissions whose callers gave up are abandoned (their leases expire and
// the sweep settles their budgets).
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.cancels.Wait()
	s.pool.Close()
	return nil
}

// call runs fn under the store's timeout.
func (s *Store) call(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return fn(ctx)
}

// now is the p_now argument of the SQL functions: nil for the database clock.
func (s *Store) now(now time.Time) any {
	if s.pinTime {
		return now.UnixNano()
	}
	return nil
}
