package gateway_test

import (
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice"
)

// A budget with reserve: estimate reserves the prompt and the model's
// mean output so far, not the worst case: once the model has settled a
// 300-token call, a call asking for more than the budget has left is sent
// as asked (and its usage charged in full at settlement), where a
// worst-case budget refuses it as budget_insufficient.
func TestGateway_ReserveEstimate(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{sluice.ReserveEstimate, sluice.ReserveWorstCase} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			budget := sluice.Rule{Name: "small_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
				Limit: 1000, Period: sluice.PeriodDay, Reserve: policy}
			h := startHarness(t, setup{rules: []sluice.Rule{budget}})
			r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":500,"messages":[{"role":"user","content":"[mock tokens=300] hi"}]}`, nil)
			if r.status != 200 {
				t.Fatalf("first call: %d %s", r.status, r.body)
			}
			h.rec.waitEvents(t, 1) // settled
			used := h.used("small_budget")
			r = h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":900,"messages":[{"role":"user","content":"hi"}]}`, nil)
			if policy == sluice.ReserveWorstCase {
				// 900 tokens and the prompt do not fit in the 695 left.
				if e := openaiError(t, r); r.status != 429 || codeOf(e) != "budget_insufficient" {
					t.Fatalf("worst case: %d %s, want 429 budget_insufficient", r.status, r.body)
				}
				return
			}
			if r.status != 200 {
				t.Fatalf("second call: %d %s, want 200: the estimate (the prompt and 300) fits", r.status, r.body)
			}
			var out struct {
				Usage struct {
					Prompt     int64 `json:"prompt_tokens"`
					Completion int64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(r.body, &out); err != nil {
				t.Fatal(err)
			}
			// The mock produces exactly the output cap it is sent.
			if out.Usage.Completion != 900 {
				t.Fatalf("the call was sent with an output cap of %d, want 900 as asked", out.Usage.Completion)
			}
			h.rec.waitEvents(t, 2)
			if got, want := h.used("small_budget"), used+out.Usage.Prompt+out.Usage.Completion; got != want {
				t.Fatalf("budget used %d, want %d: the settled usage, in full", got, want)
			}
		})
	}
}
