package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// fakeDeployment is an OpenAI-shaped provider that counts its calls,
// answers 500 while failing is set, and reports remaining requests when
// remaining is not negative.
type fakeDeployment struct {
	url       string
	calls     atomic.Int64
	failing   atomic.Bool
	remaining int
}

func startFakeDeployment(t *testing.T, remaining int) *fakeDeployment {
	t.Helper()
	f := &fakeDeployment{remaining: remaining}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if f.remaining >= 0 {
			w.Header().Set("x-ratelimit-limit-requests", "1000")
			w.Header().Set("x-ratelimit-remaining-requests", fmt.Sprint(f.remaining))
			w.Header().Set("x-ratelimit-reset-requests", "1m0s")
		}
		if f.failing.Load() {
			w.WriteHeader(500)
			fmt.Fprint(w, `{"error":{"message":"The server had an error","type":"server_error","code":null}}`)
			return
		}
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL + "/v1"
	return f
}

// deployed starts a gateway whose model gpt-multi is served by the given
// deployments, one provider each (dep0, dep1, ...).
func deployed(t *testing.T, clock *clocktest.Clock, rules []sluice.Rule, deps ...*fakeDeployment) *harness {
	t.Helper()
	return startHarness(t, setup{rules: rules, clock: clock, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		m := gateway.Model{Name: "gpt-multi", MaxOutputTokens: 100}
		o.Providers = slices.Clone(o.Providers)
		for i, d := range deps {
			name := fmt.Sprintf("dep%d", i)
			o.Providers = append(o.Providers, gateway.Provider{Name: name, Kind: gateway.KindOpenAI, BaseURL: d.url, APIKey: "sk-" + name,
				CircuitFailures: 3, CircuitCooldown: 20 * time.Second})
			m.Deployments = append(m.Deployments, gateway.Deployment{Provider: name})
		}
		o.Models = append(slices.Clone(o.Models), m)
	}}})
}

func chatMulti(h *harness) reply {
	return h.post("/v1/chat/completions", `{"model":"gpt-multi","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
}

// A failing deployment beside a good one: every client call succeeds
// (the failing one is left for the good one before the first byte); once
// its circuit opens it gets one probe per cooldown; when both fail the
// client gets 503 with Retry-After; recovery closes the circuit.
func TestGateway_DeploymentsSkipAFailingOne(t *testing.T) {
	t.Parallel()
	bad, good := startFakeDeployment(t, -1), startFakeDeployment(t, 10)
	bad.failing.Store(true)
	clock := clocktest.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	h := deployed(t, clock, []sluice.Rule{dailyTokens}, bad, good)
	for i := range 6 {
		if r := chatMulti(h); r.status != 200 || r.header.Get("X-Sluice-Model") != "gpt-multi" {
			t.Fatalf("call %d: %d %s, want 200", i, r.status, r.body)
		}
	}
	// The failing one has reported no room (so it is preferred while its
	// circuit is closed): its first call's 3 attempts opened it, and
	// nothing more reached it.
	if n := bad.calls.Load(); n != 3 {
		t.Fatalf("the failing deployment was called %d times, want 3", n)
	}
	if n := good.calls.Load(); n != 6 {
		t.Fatalf("the good deployment was called %d times, want 6", n)
	}
	// After the cooldown, one probe; it fails, the good one serves.
	clock.Advance(20 * time.Second)
	for range 3 {
		if r := chatMulti(h); r.status != 200 {
			t.Fatalf("after the cooldown: %d %s", r.status, r.body)
		}
	}
	if n := bad.calls.Load(); n != 4 {
		t.Fatalf("the failing deployment was called %d times, want 4 (one probe per cooldown)", n)
	}
	// Both fail: the good one's circuit opens too, and the client is told
	// when the soonest probe is due.
	good.failing.Store(true)
	for i := range 2 {
		r := chatMulti(h)
		if r.status != 503 || codeOf(openaiError(t, r)) != "provider_unavailable" || r.header.Get("Retry-After") == "" {
			t.Fatalf("both failing, call %d: %d Retry-After %q %s, want 503 provider_unavailable with Retry-After", i, r.status, r.header.Get("Retry-After"), r.body)
		}
	}
	if n := good.calls.Load(); n != 9+3 {
		t.Fatalf("the good deployment was called %d times, want 12 (its circuit open after 3 failures)", n)
	}
	// Recovered: probes close both circuits, and calls are served.
	bad.failing.Store(false)
	good.failing.Store(false)
	clock.Advance(21 * time.Second) // past both cooldowns, which began a few (fake) milliseconds apart
	// Each open one is probed when the draw among those alike picks it:
	// within 20 calls but once in a million runs.
	for i := 0; i < 20 && len(h.gw.Circuits()) > 0; i++ {
		if r := chatMulti(h); r.status != 200 {
			t.Fatalf("after recovery, call %d: %d %s", i, r.status, r.body)
		}
	}
	if got := h.gw.Circuits(); len(got) != 0 {
		t.Fatalf("circuits %+v after recovery, want none open or failing", got)
	}
}

// Two deployments whose providers report 100 and 5 requests left: calls
// go to the one with more room; a model rule of 10 a minute counts the
// calls of both.
func TestGateway_DeploymentsPreferTheMostRoom(t *testing.T) {
	t.Parallel()
	roomy, tight := startFakeDeployment(t, 100), startFakeDeployment(t, 5)
	clock := clocktest.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	perMinute := sluice.Rule{Name: "multi_per_minute", Kind: sluice.KindRate, Subject: "model", Limit: 10, Window: time.Minute,
		Match: sluice.Match{Models: []string{"gpt-multi"}}}
	h := deployed(t, clock, []sluice.Rule{perMinute}, roomy, tight)
	for i := range 10 {
		if r := chatMulti(h); r.status != 200 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	// Before both had reported, one call may have gone to the tight one;
	// after, every call went to the roomy one.
	if n := tight.calls.Load(); n > 1 {
		t.Fatalf("the deployment with 5 requests left got %d calls, want at most 1 (the one before it reported)", n)
	}
	if n := roomy.calls.Load() + tight.calls.Load(); n != 10 {
		t.Fatalf("the deployments got %d calls, want 10", n)
	}
	// The per-call records name the deployment that served.
	eventually(t, "the 10 calls recorded", func() bool { return len(h.rec.usage()) == 10 })
	byProvider := map[string]int64{}
	for _, u := range h.rec.usage() {
		byProvider[u.Provider]++
	}
	if byProvider["dep0"] != roomy.calls.Load() || byProvider["dep1"] != tight.calls.Load() {
		t.Fatalf("records by provider %v, want dep0 %d and dep1 %d", byProvider, roomy.calls.Load(), tight.calls.Load())
	}
	r := chatMulti(h)
	if e := openaiError(t, r); r.status != 429 || e.Error.Limit == nil || e.Error.Limit.Rule != "multi_per_minute" {
		t.Fatalf("11th call: %d %s, want 429 by multi_per_minute (counting both deployments)", r.status, r.body)
	}
}

// Deployments share calls by weight while none has reported its room.
func TestGateway_DeploymentsShareByWeight(t *testing.T) {
	t.Parallel()
	heavy, light := startFakeDeployment(t, -1), startFakeDeployment(t, -1)
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Providers = append(slices.Clone(o.Providers),
			gateway.Provider{Name: "heavy", Kind: gateway.KindOpenAI, BaseURL: heavy.url, APIKey: "sk-h"},
			gateway.Provider{Name: "light", Kind: gateway.KindOpenAI, BaseURL: light.url, APIKey: "sk-l"})
		o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "gpt-multi", MaxOutputTokens: 100,
			Deployments: []gateway.Deployment{{Provider: "heavy", Weight: 3}, {Provider: "light", Weight: 1}}})
	}}})
	const n = 200
	for i := range n {
		if r := chatMulti(h); r.status != 200 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	// 3:1 is 150 of 200; a binomial draw stays within 120..180 but once
	// in about 10^8 runs.
	if got := heavy.calls.Load(); got < 120 || got > 180 || got+light.calls.Load() != n {
		t.Fatalf("heavy got %d of %d (light %d), want about 3 in 4", got, n, light.calls.Load())
	}
}

// Limits configured on the providers (3 and 2 requests a minute, none
// reported in headers) are counted by what the gateway sends: the calls
// go to the deployment that has room left, each getting its share.
func TestGateway_DeploymentsFollowConfiguredLimits(t *testing.T) {
	t.Parallel()
	a, b := startFakeDeployment(t, -1), startFakeDeployment(t, -1)
	clock := clocktest.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, clock: clock, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Providers = append(slices.Clone(o.Providers),
			gateway.Provider{Name: "a", Kind: gateway.KindOpenAI, BaseURL: a.url, APIKey: "sk-a", RequestsPerMinute: 3},
			gateway.Provider{Name: "b", Kind: gateway.KindOpenAI, BaseURL: b.url, APIKey: "sk-b", RequestsPerMinute: 2})
		o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "gpt-multi", MaxOutputTokens: 100,
			Deployments: []gateway.Deployment{{Provider: "a"}, {Provider: "b"}}})
	}}})
	for i := range 5 {
		if r := chatMulti(h); r.status != 200 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	if a.calls.Load() != 3 || b.calls.Load() != 2 {
		t.Fatalf("a got %d calls, b %d: want 3 and 2, each up to its configured limit", a.calls.Load(), b.calls.Load())
	}
	// A minute later both have refilled.
	clock.Advance(time.Minute)
	for range 5 {
		chatMulti(h)
	}
	if a.calls.Load() != 6 || b.calls.Load() != 4 {
		t.Fatalf("after a minute a got %d calls, b %d: want 6 and 4", a.calls.Load(), b.calls.Load())
	}
}
