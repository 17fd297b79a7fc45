package gateway_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// TestGateway_TurnChargedOnceByRequestRules: six calls of one
// X-Sluice-Turn by a key allowed turns use 1 of 20 requests per minute;
// the token budget counts all six; a call of another turn, or of none, is
// one more request.
func TestGateway_TurnChargedOnceByRequestRules(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 20, Window: time.Minute},
		{Name: "tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
	}
	h := newHarness(t, rules, func(o *gateway.Options) {
		o.Keys = fakeKeys{testKey: {KeyID: "k1", Org: "o1", Workspace: "w1", User: "u1", Turns: true}}
	})
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

// A key not allowed turns (neither its own setting nor its tier's) has its
// X-Sluice-Turn ignored, and said so in its event: every call is charged,
// so that no client multiplies its request rate by sending one turn id.
func TestGateway_TurnIgnoredForAKeyNotAllowedIt(t *testing.T) {
	t.Parallel()
	rpm := sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 5, Window: time.Minute}
	h := newHarness(t, []sluice.Rule{rpm})
	body := `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"step"}]}`
	admitted := 0
	for range 8 {
		if r := h.post("/v1/chat/completions", body, map[string]string{"X-Sluice-Turn": "turn-1"}); r.status == 200 {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("%d of 8 calls of one turn admitted under 5 a minute, want 5: the turn must not be honoured", admitted)
	}
	ev := h.rec.waitEvents(t, 8)
	if !slices.Contains(ev[0].IgnoredIdentity, gateway.HeaderTurn) {
		t.Errorf("event's ignored identity %v, want %s named", ev[0].IgnoredIdentity, gateway.HeaderTurn)
	}
}
