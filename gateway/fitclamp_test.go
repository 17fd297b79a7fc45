package gateway_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm/openai"
)

// TestGateway_FitClampAboveWholeLimit: a max_tokens larger than the rule's
// whole limit is clamped to what fits, never answered 413.
func TestGateway_FitClampAboveWholeLimit(t *testing.T) {
	t.Parallel()
	body := `{"model":"up-model","max_tokens":5000,"messages":[{"role":"user","content":"Tell me everything."}]}`
	est := estimate(t, openai.ParseChat, body)
	u := startUpstream(t, 0, 0)
	h := newHarness(t, []sluice.Rule{clampRule(1000, 10)}, withUpstream(u))
	r := h.post("/v1/chat/completions", body, nil)
	want := strconv.FormatInt(1000-est, 10)
	if r.status != 200 || r.header.Get("X-Sluice-Output-Cap") != want {
		t.Fatalf("status %d, X-Sluice-Output-Cap %q, want 200 and %s: %s", r.status, r.header.Get("X-Sluice-Output-Cap"), want, r.body)
	}
	if _, sent := u.last(); upstreamCap(t, sent) != 1000-est {
		t.Errorf("provider received %s, want a cap of %d", sent, 1000-est)
	}
}

// TestGateway_FitClampBelowFloorIsTheBudgetsRefusal: when even
// min_output_tokens does not fit what is left, a call the rule would clamp
// on another day is refused as the budget refuses (terminal, with its
// reset), whether or not its max_tokens is above the whole limit; 413 is
// kept for a call that no period could hold.
func TestGateway_FitClampBelowFloorIsTheBudgetsRefusal(t *testing.T) {
	t.Parallel()
	for _, maxTokens := range []int{900, 5000} {
		t.Run(strconv.Itoa(maxTokens), func(t *testing.T) {
			u := startUpstream(t, 0, 0)
			h := newHarness(t, []sluice.Rule{clampRule(1000, 100)}, withUpstream(u))
			first := `{"model":"up-model","max_tokens":950,"messages":[{"role":"user","content":"Some. [mock tokens=950]"}]}`
			if r := h.post("/v1/chat/completions", first, nil); r.status != 200 {
				t.Fatalf("first call: %d %s", r.status, r.body)
			}
			h.rec.waitUsage(t, 1)
			calls := u.calls()
			body := `{"model":"up-model","max_tokens":` + strconv.Itoa(maxTokens) + `,"messages":[{"role":"user","content":"More."}]}`
			r := h.post("/v1/chat/completions", body, nil)
			e := openaiError(t, r)
			if r.status != 429 || r.header.Get("x-should-retry") != "false" || r.header.Get("Retry-After") != "" {
				t.Fatalf("status %d, x-should-retry %q, Retry-After %q: %s", r.status, r.header.Get("x-should-retry"), r.header.Get("Retry-After"), r.body)
			}
			if e.Error.Limit == nil || e.Error.Limit.Rule != "clamped" || e.Error.Limit.ResetAt == "" {
				t.Fatalf("limit object %+v, want the budget with its reset_at", e.Error.Limit)
			}
			if _, err := time.Parse(time.RFC3339, e.Error.Limit.ResetAt); err != nil {
				t.Errorf("reset_at %q: %v", e.Error.Limit.ResetAt, err)
			}
			if e.Error.Code == nil || (*e.Error.Code != "budget_insufficient" && *e.Error.Code != "budget_exceeded") {
				t.Errorf("code %v, want a budget refusal", e.Error.Code)
			}
			if u.calls() != calls {
				t.Error("a refused call reached the provider")
			}
		})
	}
}

// TestGateway_FitClampTokenBucketBelowFloorRetriesLater: a clamp rule on a
// token bucket that cannot hold even the floor now answers a rate limit
// with its hint, not 413.
func TestGateway_FitClampTokenBucketBelowFloorRetriesLater(t *testing.T) {
	t.Parallel()
	rule := sluice.Rule{Name: "clamped", Kind: sluice.KindRate, Subject: "workspace", Metric: sluice.MetricTokens,
		Limit: 1000, Window: time.Hour, Fit: "clamp", MinOutputTokens: 100}
	u := startUpstream(t, 0, 0)
	h := newHarness(t, []sluice.Rule{rule}, withUpstream(u))
	first := `{"model":"up-model","max_tokens":950,"messages":[{"role":"user","content":"Some. [mock tokens=950]"}]}`
	if r := h.post("/v1/chat/completions", first, nil); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	h.rec.waitUsage(t, 1)
	r := h.post("/v1/chat/completions", `{"model":"up-model","max_tokens":5000,"messages":[{"role":"user","content":"More."}]}`, nil)
	e := openaiError(t, r)
	if r.status != 429 || r.header.Get("Retry-After") == "" || e.Error.Code == nil || *e.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("status %d, Retry-After %q: %s", r.status, r.header.Get("Retry-After"), r.body)
	}
}
