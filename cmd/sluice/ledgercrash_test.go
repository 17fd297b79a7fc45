package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestServe_LedgerSurvivesKill9 kills serve (SQLite store and catalog)
// under load and starts it again: the workspace's ledger agrees with its
// daily budget counter, to within the calls in flight at the kill (their
// reservations are charged by the sweep, which the ledger does not
// record) and the ledger's one write in progress, not a second of calls.
func TestServe_LedgerSurvivesKill9(t *testing.T) {
	bin := buildSluice(t)
	data := t.TempDir()
	listen, admin := freeAddr(t), freeAddr(t)
	const token = "ledger-crash-admin-token-0123456789"
	env := append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_LISTEN="+listen, "SLUICE_ADMIN_LISTEN="+admin,
		"SLUICE_CONFIG=", "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_ENV=", "SLUICE_ADMIN_TOKEN="+token,
		"SLUICE_RATE_PER_MINUTE=0", "SLUICE_MAX_IN_FLIGHT=0")
	key := createKey(t, bin, env, "--workspace", "crash", "--user", "me")

	serve := startServe(t, serveCmd(bin, env))
	const clients, callTokens = 4, 16 + 5 // the reservation: about 5 input, 16 output
	var done atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	client := &http.Client{Timeout: 5 * time.Second}
	for range clients {
		wg.Go(func() {
			for i := 0; i < 10_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", "http://"+listen+"/v1/chat/completions",
					strings.NewReader(`{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"hi [mock tokens=5]"}]}`))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return // the server is gone
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					done.Add(1)
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	if err := serve.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	serve.exited <- <-serve.exited // ended; left for the cleanup
	t.Logf("%d calls answered 200 before the kill", done.Load())

	startServe(t, serveCmd(bin, env))
	get := func(path string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	var budget float64
	for _, l := range get("/admin/v1/effective?workspace=crash")["limits"].([]any) {
		if m := l.(map[string]any); m["rule"] == "daily_token_budget" {
			budget = m["used"].(float64)
		}
	}
	var ledger float64
	for _, r := range get("/admin/v1/usage?workspace=crash")["usage"].([]any) {
		m := r.(map[string]any)
		ledger += m["input_tokens"].(float64) + m["output_tokens"].(float64)
	}
	gap := budget - ledger
	t.Logf("after restart: budget used %v, ledger %v tokens (gap %v)", budget, ledger, gap)
	if done.Load() < 50 {
		t.Fatalf("only %d calls before the kill: the load did not run", done.Load())
	}
	// At most the calls in flight (charged whole by the sweep) and those the
	// ledger had not written yet: its group delay (5 ms) and one write, at
	// the rate the load ran (counted at 20 ms of calls, for a loaded
	// machine's scheduling).
	rate := float64(done.Load()) / 1.5
	if limit := float64(clients*callTokens) + 0.020*rate*callTokens; gap < 0 || gap > limit {
		t.Fatalf("budget %v and ledger %v differ by %v tokens, want 0 to %v", budget, ledger, gap, limit)
	}
}
