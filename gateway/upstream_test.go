package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
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

// upstream is a provider for tests: it fails the first fail calls (with
// status, or by dropping the connection when status is 0), records every
// call's headers and body, and hands the rest to the mock.
type upstream struct {
	mu       sync.Mutex
	fail     int
	status   int
	attempts int
	headers  []http.Header
	bodies   [][]byte
	next     http.Handler
	url      string
}

// startUpstream starts an upstream in front of a fresh mock.
func startUpstream(t *testing.T, fail, status int) *upstream {
	t.Helper()
	u := &upstream{fail: fail, status: status, next: mockprovider.New(mockprovider.Options{})}
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.attempts++
	u.headers = append(u.headers, r.Header.Clone())
	u.bodies = append(u.bodies, body)
	failing := u.attempts <= u.fail
	u.mu.Unlock()
	if failing {
		if u.status == 0 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(u.status)
		_, _ = io.WriteString(w, `{"error":{"message":"upstream trouble","type":"server_error","code":null,"param":null}}`)
		return
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	u.next.ServeHTTP(w, r)
}

func (u *upstream) calls() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.attempts
}

func (u *upstream) last() (http.Header, []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.headers) == 0 {
		return nil, nil
	}
	return u.headers[len(u.headers)-1], u.bodies[len(u.bodies)-1]
}

// withUpstream adds providers named up (mock kind, every route), up-openai
// and up-anthropic in front of u, and models up-model, up-openai-model and
// up-anthropic-model on them, each sent upstream as mock-small.
func withUpstream(u *upstream) func(*gateway.Options) {
	return func(o *gateway.Options) {
		o.Providers = append(slices.Clone(o.Providers),
			gateway.Provider{Name: "up", Kind: gateway.KindMock, BaseURL: u.url, APIKey: "sk-upstream-mock"},
			gateway.Provider{Name: "up-openai", Kind: gateway.KindOpenAI, BaseURL: u.url + "/v1", APIKey: "sk-upstream-openai"},
			gateway.Provider{Name: "up-anthropic", Kind: gateway.KindAnthropic, BaseURL: u.url, APIKey: "sk-upstream-anthropic"})
		price := sluice.Price{Input: 1_000_000, Output: 2_000_000}
		o.Models = append(slices.Clone(o.Models),
			gateway.Model{Name: "up-model", Provider: "up", UpstreamName: "mock-small", Price: price, MaxOutputTokens: 4096},
			gateway.Model{Name: "up-openai-model", Provider: "up-openai", UpstreamName: "mock-small", Price: price, MaxOutputTokens: 4096},
			gateway.Model{Name: "up-anthropic-model", Provider: "up-anthropic", UpstreamName: "mock-small", Price: price, MaxOutputTokens: 4096})
	}
}

// withFallbacks sets the fallback list of model.
func withFallbacks(model string, fallbacks ...string) func(*gateway.Options) {
	return func(o *gateway.Options) {
		o.Models = slices.Clone(o.Models)
		for i := range o.Models {
			if o.Models[i].Name == model {
				o.Models[i].Fallbacks = fallbacks
			}
		}
	}
}

func TestGateway_UpstreamFailureRetriedBeforeFirstByte(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path, model, body string
		status                  int
	}{
		{"Chat500", "/v1/chat/completions", "up-model", `{"model":"up-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, 500},
		{"Chat502Stream", "/v1/chat/completions", "up-openai-model", `{"model":"up-openai-model","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, 502},
		{"Chat429", "/v1/chat/completions", "up-openai-model", `{"model":"up-openai-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, 429},
		{"ChatConnectionDropped", "/v1/chat/completions", "up-model", `{"model":"up-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, 0},
		{"Responses503", "/v1/responses", "up-openai-model", `{"model":"up-openai-model","max_output_tokens":16,"input":"hi [mock tokens=4]"}`, 503},
		{"Messages529", "/v1/messages", "up-anthropic-model", `{"model":"up-anthropic-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, 529},
		{"Messages429Stream", "/v1/messages", "up-anthropic-model", `{"model":"up-anthropic-model","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, 429},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Two failures, then the mock: the default two retries suffice.
			u := startUpstream(t, 2, c.status)
			h := newHarness(t, []sluice.Rule{dailyTokens}, withUpstream(u))
			r := h.post(c.path, c.body, nil)
			if r.status != 200 {
				t.Fatalf("status %d after retries: %s", r.status, r.body)
			}
			if u.calls() != 3 {
				t.Errorf("provider called %d times, want 3", u.calls())
			}
			if r.header.Get("X-Sluice-Model") != c.model {
				t.Errorf("X-Sluice-Model %q", r.header.Get("X-Sluice-Model"))
			}
			recs := h.rec.waitUsage(t, 1)
			if len(recs) != 1 || recs[0].OutputTokens != 4 {
				t.Fatalf("ledger %+v: want one call of 4 output tokens", recs)
			}
			if got := h.used("daily_tokens"); got != recs[0].InputTokens+4 {
				t.Errorf("budget %d, want %d: settled once", got, recs[0].InputTokens+4)
			}
			if ev := h.rec.waitEvents(t, 1); len(ev) != 1 || ev[0].Attempts != 3 || ev[0].Outcome != "admitted" {
				t.Errorf("events %+v", ev)
			}
		})
	}
	t.Run("RetriesSpentPassOnTheProviderError", func(t *testing.T) {
		u := startUpstream(t, 100, 503)
		h := newHarness(t, []sluice.Rule{dailyTokens}, withUpstream(u))
		r := h.post("/v1/chat/completions", `{"model":"up-openai-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if r.status != 503 || !strings.Contains(string(r.body), "upstream trouble") {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		if u.calls() != 3 {
			t.Errorf("provider called %d times, want 3", u.calls())
		}
		if got := h.used("daily_tokens"); got != 0 {
			t.Errorf("budget charged %d for a call the model never served", got)
		}
	})
	t.Run("ClientErrorsAreNotRetried", func(t *testing.T) {
		u := startUpstream(t, 100, 400)
		h := newHarness(t, []sluice.Rule{dailyTokens}, withUpstream(u))
		r := h.post("/v1/chat/completions", `{"model":"up-openai-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if r.status != 400 || u.calls() != 1 {
			t.Fatalf("status %d after %d calls: %s", r.status, u.calls(), r.body)
		}
		if got := h.used("daily_tokens"); got != 0 {
			t.Errorf("budget charged %d", got)
		}
	})
	t.Run("NoRetries", func(t *testing.T) {
		u := startUpstream(t, 1, 500)
		h := newHarness(t, nil, withUpstream(u), func(o *gateway.Options) { o.UpstreamRetries = -1 })
		r := h.post("/v1/chat/completions", `{"model":"up-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if r.status != 500 || u.calls() != 1 {
			t.Fatalf("status %d after %d calls", r.status, u.calls())
		}
	})
}

func TestGateway_FallbackWhenProviderFails(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		t.Run(path, func(t *testing.T) {
			u := startUpstream(t, 100, 503)
			h := newHarness(t, []sluice.Rule{dailyTokens}, withUpstream(u), withFallbacks("up-model", "mock-large"))
			r := h.post(path, `{"model":"up-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, nil)
			if r.status != 200 || r.header.Get("X-Sluice-Model") != "mock-large" {
				t.Fatalf("status %d, X-Sluice-Model %q: %s", r.status, r.header.Get("X-Sluice-Model"), r.body)
			}
			var body struct {
				Model string `json:"model"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil || body.Model != "mock-large" {
				t.Errorf("answer %s, want it from mock-large", r.body)
			}
			if u.calls() != 3 || h.mockCalls() != 1 {
				t.Errorf("failing provider called %d times, fallback %d", u.calls(), h.mockCalls())
			}
			rec := h.rec.waitUsage(t, 1)[0]
			if rec.Model != "mock-large" || rec.OutputTokens != 4 {
				t.Errorf("ledger %+v", rec)
			}
			if got := h.used("daily_tokens"); got != rec.InputTokens+4 {
				t.Errorf("budget %d, want %d: the failed attempt released", got, rec.InputTokens+4)
			}
		})
	}
}

func TestGateway_FallbackWhenModelRuleRefuses(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "large_once", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1, Period: sluice.PeriodDay, Match: sluice.Match{Models: []string{"mock-large"}}},
		{Name: "small_count", Kind: sluice.KindBudget, Subject: "workspace", Limit: 100, Period: sluice.PeriodDay, Match: sluice.Match{Models: []string{"mock-small"}}},
		{Name: "per_model", Kind: sluice.KindRate, Subject: "model", Limit: 100, Window: time.Hour},
	}
	h := newHarness(t, rules, withFallbacks("mock-large", "mock-small"))
	calls := []struct{ model, served string }{
		{"mock-large", "mock-large"},
		{"mock-large", "mock-small"}, // large_once refuses: the fallback serves
		{"small", "mock-small"},      // through the alias
		{"mock-small", "mock-small"},
	}
	for i, c := range calls {
		r := h.post("/v1/chat/completions", `{"model":"`+c.model+`","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if r.status != 200 || r.header.Get("X-Sluice-Model") != c.served {
			t.Fatalf("call %d (%s): status %d, X-Sluice-Model %q, want %s: %s", i+1, c.model, r.status, r.header.Get("X-Sluice-Model"), c.served, r.body)
		}
	}
	id := sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1"}
	small, large := id, id
	small.Model, large.Model = "mock-small", "mock-large"
	if got := h.usedBy(small, "small_count"); got != 3 {
		t.Errorf("small_count %d, want 3: a rule on a model counts it as a fallback, by alias and by name", got)
	}
	if got := h.usedBy(large, "large_once"); got != 1 {
		t.Errorf("large_once %d, want 1", got)
	}
	if got := h.usedBy(small, "per_model"); got != 3 {
		t.Errorf("per_model for mock-small %d, want 3", got)
	}
	if got := h.usedBy(large, "per_model"); got != 1 {
		t.Errorf("per_model for mock-large %d, want 1 (the refused attempt released)", got)
	}
	recs := h.rec.waitUsage(t, 4)
	if recs[1].Model != "mock-small" {
		t.Errorf("ledger %+v: the fallback call is the served model's", recs[1])
	}

	t.Run("RuleNotOnTheModelDoesNotFallBack", func(t *testing.T) {
		wsOnce := sluice.Rule{Name: "ws_once", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1, Period: sluice.PeriodDay}
		h := newHarness(t, []sluice.Rule{wsOnce}, withFallbacks("mock-large", "mock-small"))
		body := `{"model":"mock-large","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
		if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		r := h.post("/v1/chat/completions", body, nil)
		if e := openaiError(t, r); r.status != 429 || e.Error.Limit == nil || e.Error.Limit.Rule != "ws_once" {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		if h.mockCalls() != 1 {
			t.Errorf("provider called %d times", h.mockCalls())
		}
	})
	t.Run("AllCandidatesRefuse", func(t *testing.T) {
		rules := []sluice.Rule{
			{Name: "large_none", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1, Period: sluice.PeriodDay, Match: sluice.Match{Models: []string{"mock-large"}}},
			{Name: "small_none", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1, Period: sluice.PeriodDay, Match: sluice.Match{Models: []string{"mock-small"}}},
		}
		h := newHarness(t, rules, withFallbacks("mock-large", "mock-small"))
		body := `{"model":"mock-large","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
		for i, want := range []string{"mock-large", "mock-small"} {
			if r := h.post("/v1/chat/completions", body, nil); r.status != 200 || r.header.Get("X-Sluice-Model") != want {
				t.Fatalf("call %d: %d %q", i+1, r.status, r.header.Get("X-Sluice-Model"))
			}
		}
		r := h.post("/v1/chat/completions", body, nil)
		e := openaiError(t, r)
		if r.status != 429 || r.header.Get("x-should-retry") != "false" || e.Error.Limit == nil || e.Error.Limit.Rule != "small_none" {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	})
	t.Run("FallbackNotAllowedForKeyIsSkipped", func(t *testing.T) {
		// sk-sluice-other may use mock-small only: its fallback mock-large
		// is never tried.
		rules := []sluice.Rule{{Name: "small_once", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1, Period: sluice.PeriodDay, Match: sluice.Match{Models: []string{"mock-small"}}}}
		h := newHarness(t, rules, withFallbacks("mock-small", "mock-large"))
		auth := map[string]string{"Authorization": "Bearer sk-sluice-other"}
		body := `{"model":"mock-small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
		if r := h.post("/v1/chat/completions", body, auth); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		r := h.post("/v1/chat/completions", body, auth)
		if r.status != 429 || h.mockCalls() != 1 {
			t.Fatalf("status %d, provider called %d times: %s", r.status, h.mockCalls(), r.body)
		}
	})
}

func TestGateway_ProviderQuotaIsTerminal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path, body string
		route            mockprovider.Route
		status           int
	}{
		{"Chat", "/v1/chat/completions", `{"model":"mock-small","max_tokens":4,"messages":[{"role":"user","content":"[mock quota]"}]}`, mockprovider.RouteChat, 429},
		{"ChatStream", "/v1/chat/completions", `{"model":"mock-small","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"[mock quota]"}]}`, mockprovider.RouteChat, 429},
		{"Responses", "/v1/responses", `{"model":"mock-small","max_output_tokens":16,"input":"[mock quota]"}`, mockprovider.RouteResponses, 429},
		{"Embeddings", "/v1/embeddings", `{"model":"mock-small","input":"[mock quota]"}`, mockprovider.RouteEmbeddings, 429},
		{"Messages", "/v1/messages", `{"model":"mock-small","max_tokens":4,"messages":[{"role":"user","content":"[mock quota]"}]}`, mockprovider.RouteMessages, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, []sluice.Rule{dailyTokens}, withFallbacks("mock-small", "mock-large"))
			r := h.post(c.path, c.body, nil)
			if r.status != c.status {
				t.Fatalf("status %d, want the provider's %d: %s", r.status, c.status, r.body)
			}
			if r.header.Get("x-should-retry") != "false" {
				t.Errorf("the quota error lacks x-should-retry: false: %v", r.header)
			}
			if !strings.Contains(strings.ToLower(string(r.body)), "quota") && !strings.Contains(string(r.body), "credit balance") {
				t.Errorf("body %s is not the provider's quota error", r.body)
			}
			if n := h.mock.Stats().Requests[c.route]; n != 1 {
				t.Errorf("provider called %d times, want 1 (never retried)", n)
			}
			if got := h.used("daily_tokens"); got != 0 {
				t.Errorf("budget charged %d", got)
			}
			if ev := h.rec.waitEvents(t, 1); len(ev) != 1 || ev[0].Attempts != 1 || ev[0].Class != "terminal" {
				t.Errorf("events %+v", ev)
			}
		})
	}
}

func TestGateway_OwnProviderKey(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "cost", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricCost, Limit: 1_000_000, Period: sluice.PeriodDay},
		{Name: "tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
	}
	cases := []struct {
		name, path, model string
		// header is where the provider reads its key, and prefix what
		// precedes it there.
		header, prefix, providerKey string
	}{
		{"OpenAI", "/v1/chat/completions", "up-openai-model", "Authorization", "Bearer ", "sk-upstream-openai"},
		{"Anthropic", "/v1/messages", "up-anthropic-model", "X-Api-Key", "", "sk-upstream-anthropic"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := startUpstream(t, 0, 0)
			h := newHarness(t, rules, withUpstream(u))
			body := `{"model":"` + c.model + `","max_tokens":50,"messages":[{"role":"user","content":"hi [mock tokens=5]"}]}`
			r := h.post(c.path, body, map[string]string{gateway.HeaderProviderKey: "sk-own-0123456789", "Authorization": "Bearer " + testKey})
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			hdr, _ := u.last()
			if got := hdr.Get(c.header); got != c.prefix+"sk-own-0123456789" {
				t.Errorf("provider saw %s %q, want the client's own key", c.header, got)
			}
			for name, values := range hdr {
				for _, v := range values {
					if strings.Contains(v, testKey) || strings.HasPrefix(strings.ToLower(name), "x-sluice") {
						t.Errorf("the provider saw %s: %s", name, v)
					}
				}
			}
			rec := h.rec.waitUsage(t, 1)[0]
			if rec.Cost != 0 || rec.OutputTokens != 5 {
				t.Errorf("ledger %+v: want tokens counted, no cost", rec)
			}
			if got := h.used("cost"); got != 0 {
				t.Errorf("cost budget charged %d for a call on the client's own key", got)
			}
			if got := h.used("tokens"); got != rec.InputTokens+5 {
				t.Errorf("token budget %d, want %d", got, rec.InputTokens+5)
			}
			// Without the header: the gateway's key, and the cost charged.
			r = h.post(c.path, body, nil)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			hdr, _ = u.last()
			if got := hdr.Get(c.header); got != c.prefix+c.providerKey {
				t.Errorf("provider saw %s %q, want the gateway's key", c.header, got)
			}
			rec = h.rec.waitUsage(t, 2)[1]
			if rec.Cost <= 0 || h.used("cost") != rec.Cost {
				t.Errorf("ledger %+v, cost budget %d", rec, h.used("cost"))
			}
		})
	}
}

// A batch call waits for a rate rule, on the limiter's clock: not before
// the bucket refills, never for a budget, and no longer than BatchMaxWait.
func TestGateway_BatchPriorityWaitsForRate(t *testing.T) {
	t.Parallel()
	rule := sluice.Rule{Name: "one_per_200ms", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: 200 * time.Millisecond}
	clock := clocktest.New(time.Now())
	h := startHarness(t, setup{rules: []sluice.Rule{rule}, clock: clock})
	first := clock.Now()
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 429 {
		t.Fatalf("interactive call with the bucket empty: %d, want 429", r.status)
	}
	r := h.post("/v1/chat/completions", smallChat, map[string]string{gateway.HeaderPriority: "batch"})
	if r.status != 200 {
		t.Fatalf("batch call: %d %s", r.status, r.body)
	}
	// The bucket holds one request and refills in 200ms: the batch call
	// cannot have been admitted before the refill, nor waited past
	// BatchMaxWait (30 s).
	recs := h.rec.waitUsage(t, 2)
	if since := recs[1].At.Sub(first); since < 200*time.Millisecond || since > 30*time.Second {
		t.Errorf("batch call answered %v after the first call, want after the 200ms refill", since)
	}
	if h.mockCalls() != 2 {
		t.Errorf("provider called %d times", h.mockCalls())
	}
	// waited is what the clock was asked to wait during f.
	waited := func(clock *clocktest.Clock, f func()) time.Duration {
		before := len(clock.Waits())
		f()
		var d time.Duration
		for _, w := range clock.Waits()[before:] {
			d += w
		}
		return d
	}

	t.Run("NeverForBudgets", func(t *testing.T) {
		t.Parallel()
		once := sluice.Rule{Name: "once", Kind: sluice.KindBudget, Subject: "key", Limit: 1, Period: sluice.PeriodDay}
		clock := clocktest.New(time.Now())
		h := startHarness(t, setup{rules: []sluice.Rule{once}, clock: clock})
		h.post("/v1/chat/completions", smallChat, nil)
		var r reply
		if d := waited(clock, func() {
			r = h.post("/v1/chat/completions", smallChat, map[string]string{gateway.HeaderPriority: "batch"})
		}); r.status != 429 || r.header.Get("x-should-retry") != "false" || d != 0 {
			t.Fatalf("batch call on a spent budget: %d after waiting %v", r.status, d)
		}
	})
	t.Run("BoundedByBatchMaxWait", func(t *testing.T) {
		t.Parallel()
		slow := sluice.Rule{Name: "one_per_minute", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute}
		clock := clocktest.New(time.Now())
		h := startHarness(t, setup{rules: []sluice.Rule{slow}, clock: clock, tweak: []func(*gateway.Options){func(o *gateway.Options) { o.BatchMaxWait = 50 * time.Millisecond }}})
		h.post("/v1/chat/completions", smallChat, nil)
		var r reply
		if d := waited(clock, func() {
			r = h.post("/v1/chat/completions", smallChat, map[string]string{gateway.HeaderPriority: "batch"})
		}); r.status != 429 || r.header.Get("Retry-After") == "" || d > 50*time.Millisecond {
			t.Fatalf("batch call that cannot be served within BatchMaxWait: %d after waiting %v", r.status, d)
		}
	})
}

// TestGateway_BatchWaitEndsWhenTheClientLeaves sends a batch call that must
// wait a second for a rate bucket, from a client that closes its connection
// after 100ms: the wait ends then, the call is never admitted nor sent
// upstream, and the bucket's next unit is left for the next caller.
func TestGateway_BatchWaitEndsWhenTheClientLeaves(t *testing.T) {
	t.Parallel()
	rule := sluice.Rule{Name: "one_per_second", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Second}
	h := newHarness(t, []sluice.Rule{rule})
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\n%s: batch\r\nContent-Length: %d\r\n\r\n%s",
		testKey, gateway.HeaderPriority, len(smallChat), smallChat)
	time.Sleep(100 * time.Millisecond)
	conn.Close()
	events := h.rec.waitEvents(t, 2)
	if took := time.Since(start); took > 700*time.Millisecond {
		t.Errorf("the call waited %v after its client left", took)
	}
	if got := events[1].Outcome; got != "client_gone" {
		t.Errorf("outcome %q, want client_gone", got)
	}
	if n := h.mockCalls(); n != 1 {
		t.Errorf("provider called %d times, want 1", n)
	}
	// The unit the departed call waited for is the next caller's.
	time.Sleep(time.Until(start.Add(time.Second)))
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("next call after the refill: %d %s", r.status, r.body)
	}
}

// When every candidate refuses on a rate, the client is told the soonest
// retry among them, not the last candidate's.
func TestGateway_EveryCandidateRefusedToldTheSoonestRetry(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "large_per_minute", Kind: sluice.KindRate, Subject: "workspace", Limit: 1, Window: time.Minute, Match: sluice.Match{Models: []string{"mock-large"}}},
		{Name: "small_per_hour", Kind: sluice.KindRate, Subject: "workspace", Limit: 1, Window: time.Hour, Match: sluice.Match{Models: []string{"mock-small"}}},
	}
	h := newHarness(t, rules, withFallbacks("mock-large", "mock-small"))
	body := `{"model":"mock-large","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	for i, served := range []string{"mock-large", "mock-small"} {
		if r := h.post("/v1/chat/completions", body, nil); r.status != 200 || r.header.Get("X-Sluice-Model") != served {
			t.Fatalf("call %d: %d served by %q, want %s", i+1, r.status, r.header.Get("X-Sluice-Model"), served)
		}
	}
	r := h.post("/v1/chat/completions", body, nil)
	retry, _ := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != 429 || retry < 1 || retry > 60 || !strings.Contains(string(r.body), "large_per_minute") {
		t.Fatalf("%d Retry-After %q %s: want 429 naming large_per_minute, retry within a minute (not the hour of the last candidate)", r.status, r.header.Get("Retry-After"), r.body)
	}
}
