package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// TestGateway_CountTokens: POST /v1/messages/count_tokens reaches the
// provider (the mock answers it), is counted by request rules, and is never
// charged tokens.
func TestGateway_CountTokens(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 2, Window: time.Hour},
		{Name: "tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodDay},
	}
	h := newHarness(t, rules)
	c := anthropicClient(h, anthropicoption.WithMaxRetries(0))
	params := anthropic.MessageCountTokensParams{
		Model:    "mock-small",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("How many tokens is this prompt, roughly?"))},
	}
	for i := range 2 {
		got, err := c.Messages.CountTokens(context.Background(), params)
		if err != nil {
			t.Fatalf("count %d: %v", i, err)
		}
		if got.InputTokens <= 0 {
			t.Errorf("count %d: input_tokens %d", i, got.InputTokens)
		}
	}
	if n := h.mock.Stats().Requests[mockprovider.RouteCountTokens]; n != 2 {
		t.Errorf("the mock counted %d count_tokens calls, want 2", n)
	}
	h.rec.waitUsage(t, 2)
	if used := h.used("tokens"); used != 0 {
		t.Errorf("the token budget was charged %d for counting tokens", used)
	}
	if used := h.used("rpm"); used != 2 {
		t.Errorf("rpm counted %d, want 2", used)
	}
	r := h.post("/v1/messages/count_tokens", `{"model":"mock-small","messages":[{"role":"user","content":"hi"}]}`, nil)
	if e := anthropicError(t, r); r.status != 429 || e.Error.Type != "rate_limit_error" || r.header.Get("Retry-After") == "" {
		t.Fatalf("third count: %d %s", r.status, r.body)
	}
}

// TestGateway_CountTokensBadBody: a count_tokens body the gateway cannot
// bound is 400 in Anthropic's shape, not forwarded.
func TestGateway_CountTokensBadBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.post("/v1/messages/count_tokens", `{"model":"mock-small"}`, nil)
	if e := anthropicError(t, r); r.status != 400 || e.Error.Type != "invalid_request_error" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if h.mockCalls() != 0 {
		t.Error("the provider was called")
	}
}
