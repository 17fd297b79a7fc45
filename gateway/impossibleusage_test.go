package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// A provider reporting more usage than the call could produce is not
// believed: the client gets its answer, the budget is charged the
// reservation, never the reported value, and the event says so.
func TestGateway_ImpossibleUsageChargesTheReservation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, usage string }{
		{"max int64 output", `{"prompt_tokens":10,"completion_tokens":9223372036854775807,"total_tokens":1}`},
		{"over the window plus the cap", `{"prompt_tokens":99950,"completion_tokens":200,"total_tokens":100150}`},
		{"over int64", `{"prompt_tokens":10,"completion_tokens":92233720368547758080,"total_tokens":1}`},
		{"a fraction", `{"prompt_tokens":10.5,"completion_tokens":1,"total_tokens":1}`},
		{"input over the window", `{"prompt_tokens":200000,"completion_tokens":1,"total_tokens":200001}`},
		{"negative", `{"prompt_tokens":-5,"completion_tokens":1,"total_tokens":1}`},
		{"cached over input", `{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":11}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":%s}`, tc.usage)
			}))
			t.Cleanup(srv.Close)
			h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
				o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "oa", Kind: gateway.KindOpenAI, BaseURL: srv.URL + "/v1", APIKey: "sk-up"})
				o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "gpt-liar", Provider: "oa", MaxOutputTokens: 100, ContextWindow: 100_000})
			}}})
			r := h.post("/v1/chat/completions", `{"model":"gpt-liar","max_tokens":100,"messages":[{"role":"user","content":"hello there"}]}`, nil)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			ev := h.rec.waitEvents(t, 1)[0]
			used := h.used("daily_tokens")
			if !ev.ImpossibleUsage || used <= 100 || used > 200 {
				t.Fatalf("event %+v, budget used %d: want the usage refused and the reservation (the input estimate plus 100) charged", ev, used)
			}
		})
	}
}

// A stream whose usage carries a count that does not parse (the fuzz
// crasher: input_tokens "A0") is charged its reservation, not the usage
// with the bad count read as 0 or -1, and the event says so.
func TestGateway_MalformedStreamUsageChargesTheReservation(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":A0,\"output_tokens\":1}}}\n\n")
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n")
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	t.Cleanup(srv.Close)
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "an", Kind: gateway.KindAnthropic, BaseURL: srv.URL, APIKey: "sk-ant"})
		o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "claude-garbled", Provider: "an", MaxOutputTokens: 100, ContextWindow: 100_000})
	}}})
	r := h.post("/v1/messages", `{"model":"claude-garbled","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello there"}]}`, nil)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	ev := h.rec.waitEvents(t, 1)[0]
	recs := h.rec.waitUsage(t, 1)
	if !ev.ImpossibleUsage || !recs[0].Estimated || h.used("daily_tokens") != recs[0].Reserved.InputTokens+recs[0].Reserved.OutputTokens {
		t.Fatalf("event %+v, record %+v, budget %d: want the reservation charged and the usage refused", ev, recs[0], h.used("daily_tokens"))
	}
}
