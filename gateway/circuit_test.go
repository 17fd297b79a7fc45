package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// A deployment that keeps failing has its circuit opened: its model is
// skipped like a refusing one (its fallback serves every call), and it is
// sent one probe per cooldown, no more; when nothing else can serve, the
// client gets 503 provider_unavailable with Retry-After until the probe;
// a probe's success closes the circuit.
func TestGateway_CircuitSkipsAFailingDeployment(t *testing.T) {
	t.Parallel()
	var calls, healthy atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if healthy.Load() == 0 {
			w.WriteHeader(500)
			fmt.Fprint(w, `{"error":{"message":"The server had an error","type":"server_error","code":null}}`)
			return
		}
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	t.Cleanup(srv.Close)
	clock := clocktest.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var changes []gateway.DependencyChange
	circuitChanges := func() []gateway.DependencyChange {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(changes)
	}
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, clock: clock, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "oa", Kind: gateway.KindOpenAI, BaseURL: srv.URL + "/v1", APIKey: "sk-up",
			CircuitFailures: 3, CircuitCooldown: 20 * time.Second})
		o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "gpt-flaky", Provider: "oa", MaxOutputTokens: 100, Fallbacks: []string{"mock-small"}},
			gateway.Model{Name: "gpt-alone", Provider: "oa", UpstreamName: "gpt-flaky", MaxOutputTokens: 100})
		o.OnDependency = func(ch gateway.DependencyChange) {
			if ch.Dependency == "circuit" {
				mu.Lock()
				changes = append(changes, ch)
				mu.Unlock()
			}
		}
	}}})
	chat := func(model string) reply {
		return h.post("/v1/chat/completions", `{"model":"`+model+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	}
	for i := range 5 {
		if r := chat("gpt-flaky"); r.status != 200 || r.header.Get("X-Sluice-Model") != "mock-small" {
			t.Fatalf("call %d: %d served by %q, want 200 from the fallback", i, r.status, r.header.Get("X-Sluice-Model"))
		}
	}
	// The first call's three attempts opened the circuit: nothing more
	// reached the failing deployment.
	if n := calls.Load(); n != 3 {
		t.Fatalf("the failing deployment was called %d times, want 3 (the circuit open after them)", n)
	}
	if changes := circuitChanges(); len(changes) != 1 || changes[0].Up || changes[0].Provider != "oa" || changes[0].Model != "gpt-flaky" {
		t.Fatalf("circuit changes %+v, want one opening of oa/gpt-flaky", changes)
	}
	// Nothing else serves gpt-alone (the same deployment): 503 until the
	// cooldown.
	r := chat("gpt-alone")
	if r.status != 503 || codeOf(openaiError(t, r)) != "provider_unavailable" || r.header.Get("Retry-After") != "20" {
		t.Fatalf("%d Retry-After %q %s, want 503 provider_unavailable, Retry-After 20", r.status, r.header.Get("Retry-After"), r.body)
	}
	// After the cooldown one probe goes through, fails, and the circuit
	// waits another cooldown; the fallback still serves.
	clock.Advance(20 * time.Second)
	for range 3 {
		if r := chat("gpt-flaky"); r.status != 200 {
			t.Fatalf("after the cooldown: %d", r.status)
		}
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("the failing deployment was called %d times, want 4 (one probe per cooldown)", n)
	}
	// Recovered: the next probe closes the circuit, and the model serves.
	healthy.Store(1)
	clock.Advance(20 * time.Second)
	for range 2 {
		if r := chat("gpt-flaky"); r.status != 200 || r.header.Get("X-Sluice-Model") != "gpt-flaky" {
			t.Fatalf("after recovery: %d served by %q, want gpt-flaky itself", r.status, r.header.Get("X-Sluice-Model"))
		}
	}
	if changes := circuitChanges(); len(changes) != 2 || !changes[1].Up {
		t.Fatalf("circuit changes %+v, want it closed by the probe", changes)
	}
	if got := h.gw.Circuits(); len(got) != 0 {
		t.Fatalf("circuits %+v after recovery, want none open or failing", got)
	}
}
