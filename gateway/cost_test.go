package gateway_test

import (
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/gateway"
)

// TestGateway_CostHeaderAndAttribution: a non-streamed answer carries its
// settled cost, the one the ledger records, and the ledger's record names
// the key, user, request id and reservation of the call.
func TestGateway_CostHeaderAndAttribution(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.post("/v1/chat/completions", smallChat, map[string]string{gateway.HeaderRequestID: "req-cost-1", gateway.HeaderTags: "eval"})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	rec := h.rec.waitUsage(t, 1)[0]
	got, err := strconv.ParseInt(r.header.Get(gateway.HeaderCostMicros), 10, 64)
	if err != nil || got != rec.Cost || got <= 0 {
		t.Fatalf("%s %q, want the ledger's cost %d", gateway.HeaderCostMicros, r.header.Get(gateway.HeaderCostMicros), rec.Cost)
	}
	// mock-small: 0.15 $/M input, 0.60 $/M output, rounded up.
	if want := (rec.InputTokens*150_000 + rec.OutputTokens*600_000 + 999_999) / 1_000_000; got != want {
		t.Errorf("cost %d, want %d for %d in and %d out", got, want, rec.InputTokens, rec.OutputTokens)
	}
	if rec.KeyID != "k1" || rec.User != "u1" || rec.RequestID != "req-cost-1" || rec.Estimated || rec.Reserved.OutputTokens != 5 || rec.Reserved.InputTokens <= 0 {
		t.Errorf("record %+v: want key k1, user u1, request req-cost-1, reported, 5 output tokens reserved", rec)
	}

	// Streamed: the cost is not known when the headers go out.
	stream := `{"model":"mock-small","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi [mock tokens=2]"}]}`
	if r := h.post("/v1/chat/completions", stream, nil); r.status != 200 || r.header.Get(gateway.HeaderCostMicros) != "" {
		t.Errorf("stream: %d, %s %q; want none", r.status, gateway.HeaderCostMicros, r.header.Get(gateway.HeaderCostMicros))
	}
	// The client's own provider key: Sluice does not price the call.
	if r := h.post("/v1/chat/completions", smallChat, map[string]string{gateway.HeaderProviderKey: "sk-own-0123456789"}); r.status != 200 || r.header.Get(gateway.HeaderCostMicros) != "" {
		t.Errorf("own key: %d, %s %q; want none", r.status, gateway.HeaderCostMicros, r.header.Get(gateway.HeaderCostMicros))
	}
}
