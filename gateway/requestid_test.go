package gateway_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// Every answer names its request: the client's own X-Request-Id when it is
// a plain token, else one the gateway makes; the event (and so the log
// line) carries it, with who was charged and the provider that served.
func TestGateway_RequestIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens})
	body := `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	r := h.post("/v1/chat/completions", body, map[string]string{"X-Request-Id": "client-req-42"})
	if r.status != 200 || r.header.Get("X-Request-Id") != "client-req-42" {
		t.Fatalf("%d, X-Request-Id %q, want the client's", r.status, r.header.Get("X-Request-Id"))
	}
	ev := h.rec.waitEvents(t, 1)[0]
	if ev.RequestID != "client-req-42" || ev.Workspace != "w1" || ev.KeyID != "k1" || ev.Provider != "mock" || ev.Duration <= 0 {
		t.Fatalf("event %+v, want the request ID, workspace, key, provider and duration", ev)
	}
	for _, bad := range []string{"", "has space", strings.Repeat("x", 129), "a\"b"} {
		r := h.post("/v1/chat/completions", `{`, map[string]string{"X-Request-Id": bad})
		if id := r.header.Get("X-Request-Id"); !strings.HasPrefix(id, "req_") || len(id) != 20 {
			t.Errorf("client id %q: answered with %q, want one the gateway made", bad, id)
		}
	}
}
