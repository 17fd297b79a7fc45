package gateway_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// oneCallADay is a budget the harness's workspace spends in one call.
var oneCallADay = sluice.Rule{Name: "one_a_day", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1, Period: sluice.PeriodDay}

// A budget refusal is 429 with x-should-retry: false, or with the default
// auto, 402 to the Vercel AI SDK (which retries every 429); a configured
// status applies to every client. The body is the same.
func TestGateway_TerminalStatusPerClient(t *testing.T) {
	t.Parallel()
	const aiSDK = "ai/6.0.325 ai-sdk/provider-utils/4.0.66 runtime/node.js/v20.20.2"
	for _, tc := range []struct {
		config, userAgent string
		want              int
	}{
		{"", "OpenAI/JS 6.30.1", 429},
		{"", aiSDK, 402},
		{gateway.TerminalAuto, "Anthropic/JS 1.15.0", 429},
		{gateway.Terminal429, aiSDK, 429},
		{gateway.Terminal402, "OpenAI/JS 6.30.1", 402},
		{gateway.Terminal400, aiSDK, 400},
	} {
		h := newHarness(t, []sluice.Rule{oneCallADay}, func(o *gateway.Options) { o.TerminalStatus = tc.config })
		body := `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
			t.Fatalf("first call %d", r.status)
		}
		r := h.post("/v1/chat/completions", body, map[string]string{"User-Agent": tc.userAgent})
		if r.status != tc.want || r.header.Get("x-should-retry") != "false" || r.header.Get("Retry-After") != "" {
			t.Errorf("config %q, %s: %d (x-should-retry %q, Retry-After %q), want %d, no retry", tc.config, tc.userAgent, r.status,
				r.header.Get("x-should-retry"), r.header.Get("Retry-After"), tc.want)
		}
	}
}

// An admitted call carries OpenAI's x-ratelimit-*-requests and -tokens
// headers for the rules of each unit with the least room, not the
// provider's own.
func TestGateway_OpenAIRateLimitHeaders(t *testing.T) {
	t.Parallel()
	rpm := sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "workspace", Limit: 10, Window: time.Minute}
	tpm := sluice.Rule{Name: "tpm", Kind: sluice.KindRate, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 100_000, Window: time.Minute}
	h := newHarness(t, []sluice.Rule{rpm, tpm, dailyTokens})
	r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for name, want := range map[string]string{
		"x-ratelimit-limit-requests":     "10",
		"x-ratelimit-remaining-requests": "9",
		"x-ratelimit-limit-tokens":       "100000",
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if rem, _ := strconv.ParseInt(r.header.Get("x-ratelimit-remaining-tokens"), 10, 64); rem <= 0 || rem >= 100_000 {
		t.Errorf("x-ratelimit-remaining-tokens = %q, want the reservation taken from 100000", r.header.Get("x-ratelimit-remaining-tokens"))
	}
	if d, err := time.ParseDuration(r.header.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > time.Minute {
		t.Errorf("x-ratelimit-reset-requests = %q, want a duration within the window", r.header.Get("x-ratelimit-reset-requests"))
	}
}

// A budget with room left, less than the request may use, is "not enough
// left", not "exhausted": the code and message say so, with what remains
// and the largest max_tokens that fits; a request that fits is admitted.
func TestGateway_NotEnoughLeftIsNotExhausted(t *testing.T) {
	t.Parallel()
	budget := sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{budget})
	if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":800,"messages":[{"role":"user","content":"spend [mock tokens=800]"}]}`, nil); r.status != 200 {
		t.Fatalf("spending: %d %s", r.status, r.body)
	}
	eventually(t, "the spend to settle", func() bool { return h.used("daily") > 800 })
	r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`, nil)
	e := openaiError(t, r)
	if r.status != 429 || deref(e.Error.Code) != "budget_insufficient" || !strings.Contains(e.Error.Message, "Not enough left") ||
		!strings.Contains(e.Error.Message, "largest max_tokens that fits now is") || r.header.Get("x-should-retry") != "false" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if l := e.Error.Limit; l == nil || l.Remaining <= 0 || l.Requested <= l.Remaining {
		t.Fatalf("limit object %+v, want what remains and what was asked", l)
	}
	var fits int64
	if _, err := fmt.Sscanf(e.Error.Message[strings.Index(e.Error.Message, "fits now is ")+len("fits now is "):], "%d", &fits); err != nil || fits <= 0 {
		t.Fatalf("no max_tokens in %q", e.Error.Message)
	}
	body := fmt.Sprintf(`{"model":"mock-small","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, fits)
	if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
		t.Fatalf("max_tokens %d, said to fit: %d %s", fits, r.status, r.body)
	}
}
