package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
)

// upstreamCap reads the output cap the provider received.
func upstreamCap(t *testing.T, body []byte) int64 {
	t.Helper()
	var b struct {
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		MaxOutputTokens     *int64 `json:"max_output_tokens"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("upstream body %s: %v", body, err)
	}
	n := int64(-1)
	for _, v := range []*int64{b.MaxTokens, b.MaxCompletionTokens, b.MaxOutputTokens} {
		if v != nil {
			n = max(n, *v)
		}
	}
	return n
}

func clampRule(limit, minOutput int64) sluice.Rule {
	return sluice.Rule{Name: "clamped", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
		Limit: limit, Period: sluice.PeriodDay, Fit: "clamp", MinOutputTokens: minOutput}
}

var fitCalls = []struct {
	name, path, body string
	parse            func([]byte) (llm.Bound, error)
}{
	{"Chat", "/v1/chat/completions", `{"model":"up-model","max_tokens":2000,"messages":[{"role":"user","content":"Tell me everything."}]}`, openai.ParseChat},
	{"ChatMaxCompletionTokens", "/v1/chat/completions", `{"model":"up-model","max_completion_tokens":2000,"messages":[{"role":"user","content":"Tell me everything."}]}`, openai.ParseChat},
	{"ChatNoCap", "/v1/chat/completions", `{"model":"up-model","messages":[{"role":"user","content":"Tell me everything."}]}`, openai.ParseChat},
	{"ChatStream", "/v1/chat/completions", `{"model":"up-model","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":"Tell me everything."}]}`, openai.ParseChat},
	{"Responses", "/v1/responses", `{"model":"up-model","max_output_tokens":2000,"input":"Tell me everything."}`, openai.ParseResponses},
	{"Messages", "/v1/messages", `{"model":"up-model","max_tokens":2000,"messages":[{"role":"user","content":"Tell me everything."}]}`, anthropic.ParseMessages},
}

// estimate is the gateway's input estimate of body.
func estimate(t *testing.T, parse func([]byte) (llm.Bound, error), body string) int64 {
	t.Helper()
	b, err := parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return b.InputTokens
}

func TestGateway_FitClampLowersOutputCap(t *testing.T) {
	t.Parallel()
	for _, c := range fitCalls {
		t.Run(c.name, func(t *testing.T) {
			// Room for the input and 300 output tokens: the worst case
			// (2000, or the model's 4096) can never fit, 300 can.
			est := estimate(t, c.parse, c.body)
			u := startUpstream(t, 0, 0)
			h := newHarness(t, []sluice.Rule{clampRule(est+300, 10)}, withUpstream(u))
			r := h.post(c.path, c.body, nil)
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if got := r.header.Get("X-Sluice-Output-Cap"); got != "300" {
				t.Errorf("X-Sluice-Output-Cap %q, want 300", got)
			}
			_, sent := u.last()
			if got := upstreamCap(t, sent); got != 300 {
				t.Errorf("the provider received an output cap of %d, want 300: %s", got, sent)
			}
			rec := h.rec.waitUsage(t, 1)[0]
			if rec.OutputTokens != 300 {
				t.Errorf("ledger %+v, want the 300 tokens the mock produced", rec)
			}
			if used := h.used("clamped"); used != rec.InputTokens+300 || used > est+300 {
				t.Errorf("budget used %d, ledger %+v", used, rec)
			}
		})
	}
}

func TestGateway_FitClampPartlySpentBudget(t *testing.T) {
	t.Parallel()
	u := startUpstream(t, 0, 0)
	h := newHarness(t, []sluice.Rule{clampRule(1000, 10)}, withUpstream(u))
	first := `{"model":"up-model","max_tokens":500,"messages":[{"role":"user","content":"Some. [mock tokens=500]"}]}`
	if r := h.post("/v1/chat/completions", first, nil); r.status != 200 || r.header.Get("X-Sluice-Output-Cap") != "" {
		t.Fatalf("first call: %d, cap %q", r.status, r.header.Get("X-Sluice-Output-Cap"))
	}
	// The first call is settled after its answer is written: wait for it,
	// or the budget may still hold its reservation rather than its usage.
	h.rec.waitUsage(t, 1)
	// 900 fits the budget's limit but not what is left of it.
	second := `{"model":"up-model","max_tokens":900,"messages":[{"role":"user","content":"More."}]}`
	want := 1000 - h.used("clamped") - estimate(t, openai.ParseChat, second)
	r := h.post("/v1/chat/completions", second, nil)
	if r.status != 200 || r.header.Get("X-Sluice-Output-Cap") != strconv.FormatInt(want, 10) {
		t.Fatalf("second call: %d, X-Sluice-Output-Cap %q, want %d: %s", r.status, r.header.Get("X-Sluice-Output-Cap"), want, r.body)
	}
	if _, sent := u.last(); upstreamCap(t, sent) != want {
		t.Errorf("provider received %s, want a cap of %d", sent, want)
	}
	// The budget is spent now: below MinOutputTokens the call is refused.
	calls := u.calls()
	r = h.post("/v1/chat/completions", second, nil)
	if e := openaiError(t, r); r.status != 429 || e.Error.Limit == nil || e.Error.Limit.Rule != "clamped" || r.header.Get("x-should-retry") != "false" {
		t.Fatalf("third call: %d %s", r.status, r.body)
	}
	if u.calls() != calls {
		t.Error("a refused call reached the provider")
	}
}

func TestGateway_FitClampRespectsFloors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path, body string
		parse            func([]byte) (llm.Bound, error)
		// room is the output room the budget leaves; minOutput the rule's.
		room, minOutput int64
	}{
		// The rule's own floor.
		{"RuleMinimum", "/v1/chat/completions", `{"model":"up-model","max_tokens":2000,"messages":[{"role":"user","content":"hi"}]}`, openai.ParseChat, 9, 10},
		// OpenAI Responses refuses max_output_tokens below 16.
		{"ResponsesMinimum", "/v1/responses", `{"model":"up-model","max_output_tokens":2000,"input":"hi"}`, openai.ParseResponses, 15, 1},
		// Anthropic wants max_tokens above the thinking budget.
		{"ThinkingBudget", "/v1/messages", `{"model":"up-model","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`, anthropic.ParseMessages, 1024, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			est := estimate(t, c.parse, c.body)
			u := startUpstream(t, 0, 0)
			h := newHarness(t, []sluice.Rule{clampRule(est+c.room, c.minOutput)}, withUpstream(u))
			r := h.post(c.path, c.body, nil)
			if r.status == 200 {
				_, sent := u.last()
				t.Fatalf("admitted with a cap of %s; the provider received %s", r.header.Get("X-Sluice-Output-Cap"), sent)
			}
			if r.status != 413 || r.header.Get("x-should-retry") != "false" {
				t.Errorf("status %d: %s", r.status, r.body)
			}
			if u.calls() != 0 || h.used("clamped") != 0 {
				t.Errorf("provider called %d times, budget %d", u.calls(), h.used("clamped"))
			}
		})
	}
}

// noUsageProvider answers every chat call with a completion that reports
// no usage, as some OpenAI-compatible servers do.
func noUsageProvider(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestGateway_NoReportedUsageChargesTheReservation: without usage in the
// answer, the reservation is charged, and the ledger records what was
// charged: the clamped cap when the cap was clamped.
func TestGateway_NoReportedUsageChargesTheReservation(t *testing.T) {
	t.Parallel()
	body := `{"model":"silent","max_tokens":2000,"messages":[{"role":"user","content":"Tell me everything."}]}`
	est := estimate(t, openai.ParseChat, body)
	price := sluice.Price{Input: 1_000_000, Output: 2_000_000}
	cases := []struct {
		name   string
		rule   sluice.Rule
		output int64
	}{
		{"AsAsked", sluice.Rule{Name: "clamped", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}, 2000},
		{"Clamped", clampRule(est+300, 10), 300},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := noUsageProvider(t)
			h := newHarness(t, []sluice.Rule{c.rule}, func(o *gateway.Options) {
				o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "silent", Kind: gateway.KindOpenAICompatible, BaseURL: url + "/v1"})
				o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "silent", Provider: "silent", Price: price, MaxOutputTokens: 4096})
			})
			if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			rec := h.rec.waitUsage(t, 1)[0]
			if used := h.used("clamped"); used != est+c.output {
				t.Errorf("budget charged %d, want the reservation %d", used, est+c.output)
			}
			want := sluice.Usage{InputTokens: est, OutputTokens: c.output}
			if rec.InputTokens != want.InputTokens || rec.OutputTokens != want.OutputTokens || rec.Cost != price.Cost(want) {
				t.Errorf("ledger %+v, want what was charged: %+v at cost %d", rec, want, price.Cost(want))
			}
		})
	}
}
