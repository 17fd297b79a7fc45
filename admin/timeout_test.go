package admin

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/store/memstore"
)

// A catalog that does not answer (here another process holds its write
// lock; in the finding, PostgreSQL stalled for 25 s) is answered 503 with
// the cause after Options.Timeout, not when the database answers.
func TestHandler_CatalogStallAnswered503AfterTheTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	cat, err := catalog.OpenSQLite(path, catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: baseRules})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 200 * time.Millisecond
	h, err := New(Options{Catalog: cat, Limiter: l, AdminToken: rootToken, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.Exec(`INSERT INTO audit_log (at, actor, action, target) VALUES (0, 'test', 'hold', 'the write lock')`); err != nil {
		t.Fatal(err)
	}

	req, _ := http.NewRequest("POST", srv.URL+"/admin/v1/keys", strings.NewReader(`{"workspace":"w","user":"u"}`))
	req.Header.Set("Authorization", "Bearer "+rootToken)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || took > 2*time.Second {
		t.Fatalf("status %d after %v, want 503 within about %v (the catalog's busy wait is 5s)", resp.StatusCode, took, timeout)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"unavailable"`) || !strings.Contains(string(body), "deadline exceeded") {
		t.Fatalf("body %s, want code unavailable with its cause", body)
	}
}
