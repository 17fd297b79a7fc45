package gateway_test

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

func paced(o *gateway.Options) { o.Providers[0].Pace = true }

// limitedProvider is the mock provider behind a rate limit kept on a fake
// clock, as a real provider keeps one: a bucket of limit calls refilled
// continuously over window, told in every answer's rate-limit headers
// (OpenAI's x-ratelimit-*-requests, Anthropic's
// anthropic-ratelimit-requests-*, whose reset is when the bucket is full
// again); a call that finds it empty is answered 429 with retry-after.
type limitedProvider struct {
	next           http.Handler
	clock          *clocktest.Clock
	limit          int64
	window         time.Duration
	mu             sync.Mutex
	used           float64 // calls not yet refilled, at at
	at             time.Time
	calls, refused int
}

func (p *limitedProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := p.clock.Now()
	perCall := float64(p.window) / float64(p.limit)
	p.mu.Lock()
	if !p.at.IsZero() {
		p.used = max(0, p.used-float64(now.Sub(p.at))/perCall)
	}
	p.at = now
	ok := p.used+1 <= float64(p.limit)
	if ok {
		p.used++
	} else {
		p.refused++
	}
	p.calls++
	used := p.used
	p.mu.Unlock()
	remaining := p.limit - int64(math.Ceil(used))
	reset := now.Add(time.Duration(used * perCall))
	h := w.Header()
	anthropic := strings.HasPrefix(r.URL.Path, "/v1/messages")
	if anthropic {
		h.Set("anthropic-ratelimit-requests-limit", strconv.FormatInt(p.limit, 10))
		h.Set("anthropic-ratelimit-requests-remaining", strconv.FormatInt(remaining, 10))
		h.Set("anthropic-ratelimit-requests-reset", reset.UTC().Format(time.RFC3339Nano))
	} else {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(p.limit, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(remaining, 10))
		h.Set("x-ratelimit-reset-requests", reset.Sub(now).Round(time.Millisecond).String())
	}
	if ok {
		p.next.ServeHTTP(w, r)
		return
	}
	wait := time.Duration((used + 1 - float64(p.limit)) * perCall)
	h.Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	h.Set("retry-after-ms", strconv.FormatInt(wait.Milliseconds()+1, 10))
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	if anthropic {
		fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached for requests."}}`)
		return
	}
	fmt.Fprint(w, `{"error":{"message":"Rate limit reached for requests.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
}

func (p *limitedProvider) counts() (calls, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, p.refused
}

// limitedHarness is a harness on a fake clock whose provider allows limit
// calls per window of that clock.
func limitedHarness(t *testing.T, limit int64, window time.Duration, tweak ...func(*gateway.Options)) (*harness, *limitedProvider) {
	clock := clocktest.New(time.Now())
	p := &limitedProvider{next: mockprovider.New(mockprovider.Options{}), clock: clock, limit: limit, window: window}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	h := startHarness(t, setup{clock: clock, tweak: append([]func(*gateway.Options){func(o *gateway.Options) { o.Providers[0].BaseURL = srv.URL }}, tweak...)})
	return h, p
}

// TestGateway_PacingHoldsWhatTheProviderWouldRefuse: a provider that allows
// 5 calls per 500 ms (one refilled every 100 ms) and says so in its
// headers. Paced, 12 calls in a row all succeed and the provider refuses
// none: the gateway held them. Not paced, the provider refuses some. The
// gateway and the provider share a fake clock: the holds take no real time.
func TestGateway_PacingHoldsWhatTheProviderWouldRefuse(t *testing.T) {
	t.Parallel()
	for _, api := range []struct{ name, path, body string }{
		{"OpenAI", "/v1/chat/completions", smallChat},
		{"Anthropic", "/v1/messages", `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(api.name, func(t *testing.T) {
			t.Parallel()
			h, provider := limitedHarness(t, 5, 500*time.Millisecond, paced)
			start := provider.clock.Now()
			for i := range 12 {
				if r := h.post(api.path, api.body, nil); r.status != 200 {
					t.Fatalf("call %d: %d %s", i, r.status, r.body)
				}
			}
			if calls, refused := provider.counts(); calls != 12 || refused != 0 {
				t.Errorf("the provider was called %d times and refused %d, want 12 and none", calls, refused)
			}
			// 5 at once, then one per 100 ms.
			if took := provider.clock.Now().Sub(start); took < 600*time.Millisecond {
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
		t.Parallel()
		h, provider := limitedHarness(t, 5, 500*time.Millisecond)
		for range 12 {
			h.post("/v1/chat/completions", smallChat, nil)
		}
		if _, refused := provider.counts(); refused == 0 {
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
