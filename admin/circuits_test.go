package admin

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics_CircuitOpen(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	m.WatchCircuits(func() []Circuit {
		return []Circuit{{Provider: "oa", Model: "gpt-4o", Open: true}, {Provider: "an", Model: "claude", Open: false}}
	})
	want := `
# HELP sluice_circuit_open 1 while the circuit of a deployment (a provider serving one model) is open: the deployment is skipped, as a refusing model is, until a probe succeeds; 0 once a deployment that failed is closed again.
# TYPE sluice_circuit_open gauge
sluice_circuit_open{model="claude",provider="an"} 0
sluice_circuit_open{model="gpt-4o",provider="oa"} 1
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "sluice_circuit_open"); err != nil {
		t.Fatal(err)
	}
}

// GET /admin/v1/circuits lists the gateway's circuits, to any reader.
func TestAPI_Circuits(t *testing.T) {
	e := newEnv(t)
	retryAt := time.Date(2026, 12, 6, 12, 0, 30, 0, time.UTC)
	e.handler.opts.Circuits = func() []Circuit { return []Circuit{{Provider: "oa", Model: "gpt-4o", Open: true, RetryAt: retryAt}} }
	req := httptest.NewRequest("GET", "/admin/v1/circuits", nil)
	req.Header.Set("Authorization", "Bearer "+rootToken)
	w := httptest.NewRecorder()
	e.handler.ServeHTTP(w, req)
	var got struct{ Circuits []Circuit }
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 || len(got.Circuits) != 1 ||
		got.Circuits[0] != (Circuit{Provider: "oa", Model: "gpt-4o", Open: true, RetryAt: retryAt}) {
		t.Fatalf("%d %s, want the open circuit of oa/gpt-4o with its retry_at", w.Code, w.Body)
	}
}

// The console's Circuits page shows each failed deployment's state and,
// for an open one, its next probe; and says so when none failed.
func TestConsole_Circuits(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.login(rootToken)
	if status, body := b.get("/ui/circuits"); status != 200 || !strings.Contains(body, "No deployment has failed") {
		t.Fatalf("no circuits: %d\n%s", status, body)
	}
	retryAt := time.Date(2026, 12, 6, 12, 0, 30, 0, time.UTC)
	e.handler.opts.Circuits = func() []Circuit {
		return []Circuit{{Provider: "oa", Model: "gpt-4o", Open: true, RetryAt: retryAt}, {Provider: "an", Model: "claude"}}
	}
	status, body := b.get("/ui/circuits")
	if status != 200 || !strings.Contains(body, "<td>oa</td><td>gpt-4o</td><td><span class=\"badge off\">open</span></td><td>2026-12-06 12:00:30</td>") ||
		!strings.Contains(body, "<td>an</td><td>claude</td><td>closed (failed lately)</td>") {
		t.Fatalf("circuits page: %d\n%s", status, body)
	}
}

// The console's Sessions page lists the replica's live connections, each
// to those who may read its workspace.
func TestConsole_LiveConnections(t *testing.T) {
	e := newEnv(t)
	opened := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	e.handler.opts.Live = func() []LiveConnection {
		return []LiveConnection{
			{RequestID: "req_live_acme", Org: "default", Workspace: "acme", User: "ada", Model: "gpt-realtime", Provider: "oa", Opened: opened, Responses: 3},
			{RequestID: "req_live_globex", Org: "default", Workspace: "globex", User: "gus", Model: "gpt-realtime", Provider: "oa", Opened: opened}}
	}
	b := e.browser()
	b.login(rootToken)
	status, body := b.get("/ui/sessions")
	if status != 200 || !strings.Contains(body, "req_live_acme") || !strings.Contains(body, "req_live_globex") || !strings.Contains(body, `<td class="n">3</td>`) {
		t.Fatalf("admin's sessions page: %d\n%s", status, body)
	}
	e.createKey("acme", "ada")
	v := e.browser()
	v.login(e.token("viewer", "acme"))
	if status, body := v.get("/ui/sessions"); status != 200 || !strings.Contains(body, "req_live_acme") || strings.Contains(body, "req_live_globex") {
		t.Fatalf("acme viewer's sessions page: %d, want acme's connection only\n%s", status, body)
	}
}
