package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestServe_EventsWebhooksAndTraces runs the built binary with a budget
// that warns at half its limit, a shadow rule, a webhook and an OTLP
// endpoint: the first crossing is audited, logged and posted (signed)
// once; the shadow rule's would-be refusal is logged; the request lines
// carry the new fields; the spans reach the collector by shutdown.
func TestServe_EventsWebhooksAndTraces(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	data := t.TempDir()
	const token = "events-test-admin-token-0123456789"
	const secret = "hook-secret-for-the-test"

	verifier, _ := standardwebhooks.NewWebhookRaw([]byte(secret))
	var mu sync.Mutex
	var hooks []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(body, r.Header); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		hooks = append(hooks, string(body))
		mu.Unlock()
	}))
	defer receiver.Close()
	var spans []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if proto.Unmarshal(body, req) == nil {
			mu.Lock()
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						spans = append(spans, s.Name)
					}
				}
			}
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()

	cfgPath := filepath.Join(data, "sluice.yaml")
	cfg := `rules:
  - name: daily_requests
    kind: budget
    subject: workspace
    metric: requests
    limit: 4
    period: day
    warn_at: [0.5]
  - name: try_one_per_hour
    kind: rate
    subject: workspace
    metric: requests
    limit: 1
    window: 1h
    mode: shadow
events:
  webhooks:
    - url: ` + receiver.URL + `
      events: [budget.warning]
      secret_env: TEST_HOOK_SECRET
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_LISTEN="+anyPort, "SLUICE_ADMIN_LISTEN="+anyPort,
		"SLUICE_CONFIG="+cfgPath, "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_ENV=production", "SLUICE_ADMIN_TOKEN="+token,
		"TEST_HOOK_SECRET="+secret, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	key := createKey(t, bin, env, "--workspace", "acme", "--user", "ada")
	serve := startServe(t, serveCmd(bin, env))
	listen, admin := serve.listen, serve.admin

	for i := range 3 {
		req, _ := http.NewRequest("POST", "http://"+listen+"/v1/chat/completions",
			strings.NewReader(`{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Sluice-Tags", "team-a")
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: status %d", i, resp.StatusCode)
		}
	}
	// The second and third calls are past half the budget: one warning.
	var audit struct {
		Entries []struct {
			Action string          `json:"action"`
			Actor  string          `json:"actor"`
			After  json.RawMessage `json:"after"`
		} `json:"entries"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+admin+"/admin/v1/audit?action=budget.warning", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&audit)
		resp.Body.Close()
		mu.Lock()
		n := len(hooks)
		mu.Unlock()
		if len(audit.Entries) > 0 && n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(audit.Entries) != 1 || audit.Entries[0].Actor != "sluice" {
		t.Fatalf("audit entries %+v, want one budget.warning", audit.Entries)
	}
	var warning struct {
		Rule, Subject, Level string
		Used, Limit          int64
	}
	if err := json.Unmarshal(audit.Entries[0].After, &warning); err != nil || warning.Rule != "daily_requests" ||
		warning.Subject != "acme" || warning.Level != "warn_at" || warning.Used != 2 || warning.Limit != 4 {
		t.Fatalf("audit entry's after %s (%v)", audit.Entries[0].After, err)
	}
	mu.Lock()
	if len(hooks) != 1 || !strings.Contains(hooks[0], `"type":"budget.warning"`) || !strings.Contains(hooks[0], `"level":"warn_at"`) {
		t.Errorf("webhooks %v, want one signed budget.warning", hooks)
	}
	mu.Unlock()

	_ = serve.cmd.Process.Signal(os.Interrupt)
	select {
	case <-serve.exited:
		serve.exited <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit on SIGINT")
	}
	logs := serve.Stderr()
	if n := strings.Count(logs, `"event":"budget.warning"`); n != 1 {
		t.Errorf("%d budget.warning log lines, want 1", n)
	}
	if n := strings.Count(logs, `"event":"rule.shadow_refusal"`); n != 2 {
		t.Errorf("%d shadow refusal lines, want 2 (calls 2 and 3)", n)
	}
	if !strings.Contains(logs, `"tags":"team-a"`) || !strings.Contains(logs, `"ttft_ms":`) || !strings.Contains(logs, `"upstream_status":200`) {
		t.Errorf("request lines lack the new fields:\n%s", logs)
	}
	mu.Lock()
	defer mu.Unlock()
	joined := strings.Join(spans, ",")
	for _, want := range []string{"POST /v1/chat/completions", "sluice.authenticate", "sluice.admit", "chat mock-small", "sluice.settle"} {
		if strings.Count(joined, want) < 3 {
			t.Errorf("spans %v: want %q for each of the 3 calls", spans, want)
		}
	}
}
