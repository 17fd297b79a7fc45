package catalog

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// An override written straight into the database, as automation does with
// INSERT ... ON CONFLICT, is seen by a watching catalog within a fraction of
// a second, on both backends; so is one deleted.
func TestWatchPolicy_SeesDirectWrites(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		changes := make(chan struct{}, 64)
		errs := make(chan error, 8)
		go c.WatchPolicy(ctx, 20*time.Millisecond, func() {
			select {
			case changes <- struct{}{}:
			default:
			}
		}, func(err error) { errs <- err })
		// The watch starts with a refresh; let it settle, then drain.
		time.Sleep(300 * time.Millisecond)
		for len(changes) > 0 {
			<-changes
		}
		exec := directExec(t, be)
		for _, stmt := range []string{
			`INSERT INTO overrides (rule, org, attribute, value, limit_value, burst, expires_at, updated_at)
			 VALUES ('rpm', '', 'key', 'k1', 5, NULL, NULL, 0)
			 ON CONFLICT (rule, org, attribute, value) DO UPDATE SET limit_value = excluded.limit_value`,
			`DELETE FROM overrides WHERE value = 'k1'`,
		} {
			start := time.Now()
			exec(stmt)
			select {
			case <-changes:
				t.Logf("seen after %v", time.Since(start))
			case err := <-errs:
				t.Fatalf("watch: %v", err)
			case <-time.After(2 * time.Second):
				t.Fatalf("no change seen 2 s after %q", stmt)
			}
		}
	})
}

// directExec returns a function that runs a statement on the backend's
// database through a connection of its own, not the Catalog.
func directExec(t *testing.T, be *backend) func(string) {
	t.Helper()
	if be.path != "" {
		db, err := sql.Open("sqlite", "file:"+be.path+"?_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return func(stmt string) {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
	}
	conn, err := pgx.Connect(context.Background(), be.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return func(stmt string) {
		if _, err := conn.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}
