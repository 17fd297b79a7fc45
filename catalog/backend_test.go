package catalog

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testenv"
)

// backend is one database a test runs the catalog on: a fresh SQLite file,
// or a fresh schema of the PostgreSQL database SLUICE_TEST_POSTGRES_URL
// names. Every Catalog a test opens on a backend shares its database, as
// processes sharing a deployment's catalog do.
type backend struct {
	name string
	d    *dialect
	// path is the SQLite file; empty on PostgreSQL.
	path string
	// url is the PostgreSQL URL, its search_path set to the test's schema;
	// empty on SQLite.
	url string
}

// eachBackend runs fn as a subtest on SQLite and on PostgreSQL. The
// PostgreSQL variant is gated by testenv.PostgresURL. The test and both
// subtests run in parallel with the package's other tests that use it:
// each has its own SQLite file or PostgreSQL schema, and a clock of its
// own, so they share nothing (a test calls it once, as its whole body).
func eachBackend(t *testing.T, fn func(t *testing.T, be *backend)) {
	t.Helper()
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, &backend{name: "sqlite", d: sqliteDialect, path: filepath.Join(t.TempDir(), "catalog.db")})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, &backend{name: "postgres", d: postgresDialect, url: testSchemaURL(t)})
	})
}

// testSchemaURL creates a fresh schema t_<random> for one test, drops it
// with everything in it at cleanup, and returns the test database's URL
// with search_path set to it.
func testSchemaURL(tb testing.TB) string {
	tb.Helper()
	base := testenv.PostgresURL(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("connect to SLUICE_TEST_POSTGRES_URL: %v", err)
	}
	defer admin.Close(ctx)
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		tb.Fatalf("create schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("SLUICE_TEST_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// open opens another Catalog on the backend's database.
func (be *backend) open(opts Options) (*Catalog, error) {
	if be.path != "" {
		return OpenSQLite(be.path, opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return OpenPostgres(ctx, be.url, opts)
}

// openTest opens a catalog on the backend with a fake clock and no
// background flusher; it is closed when the test ends.
func (be *backend) openTest(t testing.TB) (*Catalog, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	c, err := be.open(Options{Now: clock.Now, FlushInterval: -1})
	if err != nil {
		t.Fatalf("open %s: %v", be.name, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c, clock
}

// stored returns everything the backend holds, by name: every file of the
// SQLite database (main, WAL, shared memory), or the text of every row of
// every catalog table on PostgreSQL.
func (be *backend) stored(t testing.TB, c *Catalog) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	if be.path != "" {
		files, _ := filepath.Glob(be.path + "*")
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(f)] = b
		}
		return out
	}
	for _, table := range []string{"api_keys", "admin_tokens", "audit_log", "overrides", "rules", "usage_ledger"} {
		var dump sql.NullString
		if err := c.db.QueryRow(`SELECT string_agg(x::text, E'\n') FROM ` + table + ` x`).Scan(&dump); err != nil {
			t.Fatal(err)
		}
		out[table] = []byte(dump.String)
	}
	return out
}

// refuseInserts makes every INSERT into table fail until allowInserts.
func (be *backend) refuseInserts(t testing.TB, c *Catalog, table string) {
	t.Helper()
	stmts := []string{`CREATE TRIGGER refuse BEFORE INSERT ON ` + table + ` BEGIN SELECT RAISE(ABORT, 'refused'); END`}
	if be.path == "" {
		stmts = []string{
			`CREATE OR REPLACE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$`,
			`CREATE TRIGGER refuse BEFORE INSERT ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION refuse()`,
		}
	}
	for _, s := range stmts {
		if _, err := c.db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
}

// allowInserts undoes refuseInserts.
func (be *backend) allowInserts(t testing.TB, c *Catalog, table string) {
	t.Helper()
	s := `DROP TRIGGER refuse`
	if be.path == "" {
		s = `DROP TRIGGER refuse ON ` + table
	}
	if _, err := c.db.Exec(s); err != nil {
		t.Fatal(err)
	}
}
