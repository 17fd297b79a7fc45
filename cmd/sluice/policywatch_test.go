package main

import (
	"database/sql"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// TestServe_OverrideWrittenInTheDatabaseAppliesAtOnce writes an override
// straight into the catalog's SQLite file, as automation would with INSERT
// ... ON CONFLICT, while the gateway runs: within half a second calls are
// refused by it (the backstop poll is 30 s; the catalog's change watch sees
// the write).
func TestServe_OverrideWrittenInTheDatabaseAppliesAtOnce(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	data := t.TempDir()
	env := append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_LISTEN="+anyPort, "SLUICE_ADMIN_LISTEN="+anyPort,
		"SLUICE_CONFIG=", "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_ENV=", "SLUICE_ADMIN_TOKEN=")
	key := createKey(t, bin, env, "--workspace", "w", "--user", "u")
	listen := startServe(t, serveCmd(bin, env)).listen
	call := func() (int, string) {
		t.Helper()
		body := `{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
		req, _ := http.NewRequest("POST", "http://"+listen+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if got, _ := call(); got != 200 {
		t.Fatalf("first call: %d", got)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, "catalog.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO overrides (rule, org, attribute, value, limit_value, burst, expires_at, updated_at)
		VALUES ('rate_per_minute', 'default', 'workspace', 'w', 1, NULL, NULL, ?)
		ON CONFLICT (rule, org, attribute, value) DO UPDATE SET limit_value = excluded.limit_value`, time.Now().Unix()); err != nil {
		t.Fatal(err)
	}
	// Called until the override refuses (its limit of 1 named in the
	// refusal, not the default rule's), for at most half a second.
	written := time.Now()
	for {
		got, body := call()
		if got == 429 && strings.Contains(body, `"limit":1,`) {
			break
		}
		if time.Since(written) > 500*time.Millisecond {
			t.Fatalf("calls for 500 ms after an override of 1 a minute was written in the database: the last %d %s, want 429 by the override", got, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
