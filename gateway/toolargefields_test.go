package gateway_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestGateway_NeverFitsFieldsNameItsRule: a 413 for a request that never
// fits a rule carries that rule's rate-limit fields, the rule its body's
// limit object names, even when another rule has less room (issue 31).
func TestGateway_NeverFitsFieldsNameItsRule(t *testing.T) {
	t.Parallel()
	tokensPerDay := sluice.Rule{Name: "tokens_per_day", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodDay}
	rpm := sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricRequests, Limit: 2, Window: time.Minute}
	h := newHarness(t, []sluice.Rule{tokensPerDay, rpm})
	if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	h.rec.waitUsage(t, 1)
	r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":4000,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 413 {
		t.Fatalf("never fits: %d %s", r.status, r.body)
	}
	var body struct {
		Error struct {
			Limit struct{ Rule string } `json:"limit"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || body.Error.Limit.Rule != "tokens_per_day" {
		t.Fatalf("body %s (%v), want its limit to name tokens_per_day", r.body, err)
	}
	checkLimitHeaders(t, r, "tokens_per_day", 1000, 1000-h.used("tokens_per_day"), 24*time.Hour)
}
