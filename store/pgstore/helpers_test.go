package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/pgstore"
)

// postgresURL is the one gate of every test of this package that needs
// PostgreSQL: testenv.PostgresURL.
func postgresURL(tb testing.TB) string {
	tb.Helper()
	return testenv.PostgresURL(tb)
}

// adminPool returns a small pool on the test database's default schema,
// closed at cleanup.
func adminPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(postgresURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// testSchema returns the name of a fresh PostgreSQL schema for one test and
// drops it, with everything in it, at cleanup. Tests share the database but
// never a table.
func testSchema(tb testing.TB) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "pgstore_test_" + hex.EncodeToString(b[:])
	pool := adminPool(tb)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// openStore opens a Store in schema with opts (URL and Schema filled in) and
// closes it at cleanup.
func openStore(tb testing.TB, schema string, opts pgstore.Options) *pgstore.Store {
	tb.Helper()
	if opts.URL == "" {
		opts.URL = postgresURL(tb)
	}
	opts.Schema = schema
	if opts.MaxConns == 0 {
		opts.MaxConns = 4
	}
	s, err := pgstore.Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// admitBatch is s.Admit of b at now, with room for the results, which it
// drops.
func admitBatch(ctx context.Context, s sluice.Store, now time.Time, b *sluice.Batch) (bool, error) {
	return s.Admit(ctx, now, *b, make([]sluice.ChargeResult, len(b.Charges)))
}
