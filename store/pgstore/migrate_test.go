package pgstore_test

import (
	"context"
	"errors"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/store/pgstore"
)

// schemaPool returns a pool whose search_path is schema, closed at cleanup.
func schemaPool(t testing.TB, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func versions(t *testing.T, pool *pgxpool.Pool) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT version FROM sluice_store_schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestMigrate_FreshReopenAndConcurrentOpens(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	// Five replicas start together on an empty schema: one migrates, the
	// others wait for its lock and find nothing to do.
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			s, err := pgstore.Open(ctx, pgstore.Options{URL: postgresURL(t), Schema: schema, MaxConns: 2})
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent open: %v", err)
	}
	pool := schemaPool(t, schema)
	if got, want := versions(t, pool), pgstore.LatestVersion(); len(got) != want || got[len(got)-1] != want {
		t.Fatalf("versions recorded %v, want 1..%d once each", got, want)
	}
	// Reopening and migrating again change nothing.
	openStore(t, schema, pgstore.Options{}).Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	if err := pgstore.CheckSchema(ctx, pool); err != nil {
		t.Fatalf("check schema: %v", err)
	}
	if got := versions(t, pool); len(got) != pgstore.LatestVersion() {
		t.Fatalf("versions after reopening %v", got)
	}
}

func TestMigrate_ExportedMigrateOnAnOlderSchema(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	admin := adminPool(t)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	pool := schemaPool(t, schema)
	if err := pgstore.CheckSchema(ctx, pool); !errors.Is(err, pgstore.ErrSchemaTooOld) {
		t.Fatalf("check an empty schema: %v, want ErrSchemaTooOld", err)
	}
	_, err := pgstore.Open(ctx, pgstore.Options{URL: postgresURL(t), Schema: schema, NoMigrate: true})
	if !errors.Is(err, pgstore.ErrSchemaTooOld) || !strings.Contains(err.Error(), "sluice migrate") {
		t.Fatalf("open with NoMigrate on an empty schema: %v, want ErrSchemaTooOld naming sluice migrate", err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	openStore(t, schema, pgstore.Options{NoMigrate: true})
}

func TestMigrate_SchemaFromTheFutureIsRefused(t *testing.T) {
	schema := testSchema(t)
	openStore(t, schema, pgstore.Options{}).Close()
	pool := schemaPool(t, schema)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "INSERT INTO sluice_store_schema_migrations (version, name) VALUES (9999, '9999_future.sql')"); err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func() error{
		"open": func() error {
			_, err := pgstore.Open(ctx, pgstore.Options{URL: postgresURL(t), Schema: schema})
			return err
		},
		"open without migrating": func() error {
			_, err := pgstore.Open(ctx, pgstore.Options{URL: postgresURL(t), Schema: schema, NoMigrate: true})
			return err
		},
		"migrate": func() error { return pgstore.Migrate(ctx, pool) },
	} {
		err := open()
		t.Logf("%s: %v", name, err)
		if !errors.Is(err, pgstore.ErrSchemaTooNew) || !strings.Contains(err.Error(), "9999") {
			t.Fatalf("%s: %v, want ErrSchemaTooNew naming version 9999", name, err)
		}
	}
	if got := versions(t, pool); got[len(got)-1] != 9999 || len(got) != pgstore.LatestVersion()+1 {
		t.Fatalf("versions after a refused migration %v, want them untouched", got)
	}
}

func TestOpen_BadURLs(t *testing.T) {
	url := postgresURL(t)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		opts pgstore.Options
		want string
	}{
		"missing":   {pgstore.Options{}, "URL is required"},
		"malformed": {pgstore.Options{URL: "postgres://user:secret@[::1"}, "pgstore: open"},
		"bad port":  {pgstore.Options{URL: "postgres://postgres@127.0.0.1:notaport/test"}, "pgstore: open"},
		// Nothing listens on port 1: the error comes at once, not after
		// the timeout.
		"unreachable": {pgstore.Options{URL: "postgres://postgres@127.0.0.1:1/test?sslmode=disable", Timeout: 500 * time.Millisecond}, "pgstore"},
		"no database": {pgstore.Options{URL: otherDatabase(t, url, "no_such_database_x")}, "pgstore"},
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			s, err := pgstore.Open(ctx, tc.opts)
			if err == nil {
				s.Close()
				t.Fatal("open succeeded")
			}
			t.Log(err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("error %q shows the password", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

// otherDatabase returns url with its database replaced by name, whatever
// the test database is called.
func otherDatabase(t *testing.T, url, name string) string {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// TestMigrate_Version1IsRefusedThenUpgradedWithItsCounters builds a schema
// at version 1 (0001 alone, as released before group commit) holding a
// reservation made by 0001's sluice_admit. Opening it without migrating is
// refused as too old; opening it migrates to the latest version, and the
// group commit's admissions count the reservation made by the old code.
func TestMigrate_Version1IsRefusedThenUpgradedWithItsCounters(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	if _, err := adminPool(t).Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	pool := schemaPool(t, schema)
	v1, err := os.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(24 * time.Hour).UnixNano()
	for _, sql := range []string{
		string(v1),
		`CREATE TABLE sluice_store_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO sluice_store_schema_migrations (version, name) VALUES (1, '0001_init.sql')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var admitted bool
	if err := pool.QueryRow(ctx, `SELECT admitted FROM sluice_admit(NULL, false, 7, 60000000000, '{2}', '{51}', '{w}', '{1}',
		'{100}', '{100}', '{0}', ARRAY[$1::bigint], '{40}', '{f}', '{f}')`, end).Scan(&admitted); err != nil || !admitted {
		t.Fatalf("0001's sluice_admit: %v %v", admitted, err)
	}

	_, err = pgstore.Open(ctx, pgstore.Options{URL: postgresURL(t), Schema: schema, NoMigrate: true})
	if !errors.Is(err, pgstore.ErrSchemaTooOld) {
		t.Fatalf("open a version 1 schema without migrating: %v, want ErrSchemaTooOld", err)
	}
	s := openStore(t, schema, pgstore.Options{})
	if got := versions(t, pool); len(got) != pgstore.LatestVersion() || got[len(got)-1] != pgstore.LatestVersion() {
		t.Fatalf("versions after opening %v", got)
	}
	for _, c := range []struct {
		amount int64
		want   bool
	}{{61, false}, {60, true}} {
		b := batch(budgetCharge(51, "w", 100, c.amount))
		ok, err := admitBatch(ctx, s, time.Now(), b)
		if err != nil || ok != c.want {
			t.Fatalf("admit %d beside the old 40 of 100: %v %v, want %v", c.amount, ok, err, c.want)
		}
	}
}
