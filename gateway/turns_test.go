package gateway_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestGateway_TurnChargedOnceByRequestRules: six calls of one
// X-Sluice-Turn use 1 of 20 requests per minute; the token budget counts
// all six; a call of another turn, or of none, is one more request.
func TestGateway_TurnChargedOnceByRequestRules(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 20, Window: time.Minute},
		{Name: "tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
	}
	h := newHarness(t, rules)
	body := `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"step [mock tokens=5]"}]}`
	for i := range 6 {
		if r := h.post("/v1/chat/completions", body, map[string]string{"X-Sluice-Turn": "turn-1"}); r.status != 200 {
			t.Fatalf("step %d: %d %s", i, r.status, r.body)
		}
	}
	recs := h.rec.waitUsage(t, 6)
	var tokens int64
	for _, r := range recs {
		tokens += r.InputTokens + r.OutputTokens
	}
	if used := h.used("rpm"); used != 1 {
		t.Errorf("rpm counted %d for a six-step turn, want 1 of 20", used)
	}
	if used := h.used("tokens"); used != tokens || tokens == 0 {
		t.Errorf("tokens counted %d, want every step's %d", used, tokens)
	}
	h.post("/v1/chat/completions", body, map[string]string{"X-Sluice-Turn": "turn-2"})
	h.post("/v1/chat/completions", body, nil)
	h.rec.waitUsage(t, 8)
	if used := h.used("rpm"); used != 3 {
		t.Errorf("rpm counted %d after two more calls, want 3", used)
	}
}
