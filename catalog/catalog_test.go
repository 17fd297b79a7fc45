package catalog

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestOpen_MigrationsIdempotentOnReopen(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		ctx := context.Background()
		c, err := be.open(Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			c, err = be.open(Options{})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			keys, err := c.ListKeys(ctx, "")
			if err != nil || len(keys) != 1 || keys[0].ID != k.ID {
				t.Fatalf("keys after reopen = %v, %v; want the one key %s", keys, err, k.ID)
			}
			var versions int
			if err := c.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&versions); err != nil {
				t.Fatal(err)
			}
			ms, _ := be.d.migrations()
			if versions != len(ms) {
				t.Fatalf("schema_migrations has %d rows, want %d", versions, len(ms))
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestOpen_RefusesNewerSchema(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, err := be.open(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'future.sql', 0)`); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if c, err := be.open(Options{}); err == nil || !strings.Contains(err.Error(), "newer") {
			if c != nil {
				c.Close()
			}
			t.Fatalf("open on a newer schema: err = %v, want a refusal", err)
		}
	})
}

func TestOpen_ConcurrentOpensMigrateOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				c, err := be.open(Options{})
				if err == nil {
					err = c.Close()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("open %d: %v", i, err)
			}
		}
	})
}

func TestOpenSQLite_EmptyPath(t *testing.T) {
	if _, err := OpenSQLite("", Options{}); err == nil {
		t.Fatal("OpenSQLite(\"\") succeeded")
	}
}

func TestDollarPlaceholders(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`a = ? AND b = ?`, `a = $1 AND b = $2`},
		{`a = '?' AND b = ? AND "c?" = ?`, `a = '?' AND b = $1 AND "c?" = $2`},
	} {
		if got := postgresDialect.q(tc.in); got != tc.want {
			t.Errorf("rebind(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := sqliteDialect.q(`a = ?`); got != `a = ?` {
		t.Errorf("sqlite rebind changed the query: %q", got)
	}
}

func TestMigrations_WellFormed(t *testing.T) {
	ms, err := sqliteDialect.migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Errorf("migration %s has version %d, want %d (no gaps)", m.Name, m.Version, i+1)
		}
	}
}

var _ queryer = (*sql.DB)(nil)
var _ queryer = (*sql.Tx)(nil)

func TestOpenPostgres_Errors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := OpenPostgres(ctx, "", Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("OpenPostgres(\"\") = %v, want ErrInvalid", err)
	}
	for _, u := range []string{
		"postgres://u:s3cret@[::1/x",                                          // unparsable
		"postgres://u:s3cret@127.0.0.1:1/x?connect_timeout=5&sslmode=disable", // nothing listens
	} {
		c, err := OpenPostgres(ctx, u, Options{})
		if err == nil {
			c.Close()
			t.Fatalf("OpenPostgres(%q) succeeded", u)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("OpenPostgres(%q): error shows the password: %v", u, err)
		}
	}
}
