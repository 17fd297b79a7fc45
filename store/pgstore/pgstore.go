// Package pgstore is the sluice.Store over PostgreSQL, for several gateway
// replicas sharing counters and reservations durably.
//
// Every admission is one transaction and one round trip: a PL/pgSQL function
// (sluice_admit, in migrations/0001_init.sql) takes the batch's charges as
// arrays, locks their counter rows in key order, evaluates every rule and
// applies all of them or none. Settlement and the sweep are one function call
// each too. Why a function and not statements sent from Go: the function holds
// the row locks for the time PostgreSQL takes to run it, never across a
// client round trip, which is what bounds throughput on a hot subject;
// measured on one machine (BenchmarkAdmitStrategy), it admits 2.2x faster on
// distinct subjects and 3.6x faster on one hot subject than the same work as a
// two-round-trip pipelined transaction.
//
// Semantics are store/memstore's, exact: rate buckets keep memstore's
// nanosecond-plus-fraction arithmetic (numeric in SQL, never rounded), budgets
// count settled plus reserved usage, and concurrency leases are rows with an
// expiry, pruned when their key is next admitted.
//
// Time is the database's (clock_timestamp(), read once the rows are locked),
// so replicas with skewed clocks still share one timeline; a lease or a
// reservation expires at the database's now plus the batch's timeout. Budget
// periods are still chosen by the engine's clock. Options.PinTime makes the
// store use the caller's now instead, for tests that drive a manual clock.
//
// Durability: a settlement returns after its commit, so a kill -9 of a
// replica loses no settled usage; its open reservations are settled by
// the sweep of any replica (Sweep may run on all of them at once) and its
// leases free themselves at expiry. An admission that times out on the client
// after the server committed it stays reserved until the sweep charges it
// (fail closed).
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
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
}

// Store is a sluice.Store backed by PostgreSQL. It is safe for concurrent
// use, by any number of processes sharing the database.
type Store struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	pinTime bool
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
	s := &Store{timeout: opts.Timeout, pinTime: opts.PinTime}
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
		return nil
	}
	if err := migrate(ctx, s.pool); err != nil {
		return fmt.Errorf("pgstore: open: migrate: %w", err)
	}
	return nil
}

// Close closes the pool; calls in flight finish first.
func (s *Store) Close() error {
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
