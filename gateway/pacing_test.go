package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

func paced(o *gateway.Options) { o.Providers[0].Pace = true }

// TestGateway_PacingHoldsWhatTheProviderWouldRefuse: a provider that allows
// 5 calls per 500 ms (one refilled every 100 ms) and says so in its
// headers. Paced, 12 calls in a row all succeed and the provider refuses
// none: the gateway held them. Not paced, the provider refuses some.
func TestGateway_PacingHoldsWhatTheProviderWouldRefuse(t *testing.T) {
	t.Parallel()
	limited := mockprovider.Options{RateLimitRequests: 5, RateLimitWindow: 500 * time.Millisecond}
	for _, api := range []struct{ name, path, body string }{
		{"OpenAI", "/v1/chat/completions", smallChat},
		{"Anthropic", "/v1/messages", `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(api.name, func(t *testing.T) {
			h := startHarness(t, setup{mock: limited, tweak: []func(*gateway.Options){paced}})
			start := time.Now()
			for i := range 12 {
				if r := h.post(api.path, api.body, nil); r.status != 200 {
					t.Fatalf("call %d: %d %s", i, r.status, r.body)
				}
			}
			if n := h.mock.Stats().RateLimited; n != 0 {
				t.Errorf("the provider refused %d calls", n)
			}
			// 5 at once, then one per 100 ms.
			if took := time.Since(start); took < 600*time.Millisecond {
				t.Errorf("12 calls took %v: not held", took)
			}
			var held time.Duration
			for _, e := range h.rec.waitEvents(t, 12) {
				held += e.Paced
			}
			if held < 500*time.Millisecond {
				t.Errorf("events say the calls were held %v in all", held)
			}
		})
	}
	t.Run("NotPaced", func(t *testing.T) {
		h := startHarness(t, setup{mock: limited})
		for range 12 {
			h.post("/v1/chat/completions", smallChat, nil)
		}
		if h.mock.Stats().RateLimited == 0 {
			t.Error("without pacing the provider refused nothing: the test proves nothing")
		}
	})
}

// TestGateway_PacingRefusesALongWait: when the provider would refuse for
// longer than PaceMaxWait, the call is refused 429 at once with
// Retry-After, the provider is not called, and nothing is charged.
func TestGateway_PacingRefusesALongWait(t *testing.T) {
	t.Parallel()
	budget := sluice.Rule{Name: "daily_requests", Kind: sluice.KindBudget, Subject: "workspace", Limit: 100, Period: sluice.PeriodDay}
	h := startHarness(t, setup{rules: []sluice.Rule{budget}, mock: mockprovider.Options{RateLimitRequests: 2, RateLimitWindow: 20 * time.Second},
		tweak: []func(*gateway.Options){paced, func(o *gateway.Options) { o.PaceMaxWait = 100 * time.Millisecond }}})
	for i := range 2 {
		if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	start := time.Now()
	r := h.post("/v1/chat/completions", smallChat, nil)
	if r.status != 429 || r.header.Get("Retry-After") == "" || r.header.Get("x-should-retry") == "false" ||
		!strings.Contains(string(r.body), "provider_rate_limited") || time.Since(start) > 2*time.Second {
		t.Fatalf("third call: %d %v %s", r.status, r.header, r.body)
	}
	if n := h.mock.Stats().Requests[mockprovider.RouteChat]; n != 2 {
		t.Errorf("the provider was called %d times, want 2", n)
	}
	if got := h.used("daily_requests"); got != 2 {
		t.Errorf("budget charged %d requests, want the 2 served", got)
	}
	ev := h.rec.waitEvents(t, 3)
	if ev[2].Outcome != "rate_limited" || ev[2].Class != "throttled" {
		t.Errorf("event %+v", ev[2])
	}
}
