package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// The records of a session's calls name it: an HTTP call made with
// X-Sluice-Session, a live connection and each of its responses (which
// also name the connection), with a response's audio tokens.
func TestRealtime_RecordsNameTheSessionAndTheConnection(t *testing.T) {
	h := sessionHarness(t, nil)
	_, s := h.sessionCall("POST", "/v1/sessions", `{}`, nil)
	if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{gateway.HeaderSession: s.ID}); r.status != 200 {
		t.Fatalf("chat in the session: %d %s", r.status, r.body)
	}
	c := h.mustDialLive(t, map[string]string{gateway.HeaderSession: s.ID})
	c.send(`{"type":"session.update","session":{"type":"realtime","output_modalities":["audio"]}}`)
	c.next("session.updated")
	c.send(`{"type":"input_audio_buffer.append","audio":"` + strings.Repeat("A", 64_000) + `"}`) // one second: 10 tokens
	c.send(`{"type":"input_audio_buffer.commit"}`)
	c.send(`{"type":"response.create","response":{"max_output_tokens":10}}`)
	c.next("response.done")
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, "three records", func() bool { return len(h.rec.usage()) == 3 })

	// The records come in no set order: the HTTP call's is written after
	// its answer, so it may come after the live connection's (seen on a
	// loaded machine). Each is known by what it is: the HTTP call by its
	// route, a response by its numbered request id.
	var chat, response, conn gateway.UsageRecord
	for _, r := range h.rec.usage() {
		switch {
		case r.Route != "realtime":
			chat = r
		case strings.Contains(r.RequestID, "/"):
			response = r
		default:
			conn = r
		}
	}
	if chat.SessionID != s.ID || chat.ConnectionID != "" {
		t.Errorf("HTTP call's record: session %q, connection %q; want %q and none", chat.SessionID, chat.ConnectionID, s.ID)
	}
	if conn.Route != "realtime" || conn.SessionID != s.ID || conn.ConnectionID == "" || conn.ConnectionID != conn.RequestID {
		t.Errorf("connection's record %+v: want the session, and its own request id as the connection", conn)
	}
	if response.SessionID != s.ID || response.ConnectionID != conn.RequestID || response.RequestID != conn.RequestID+"/1" {
		t.Errorf("response's record: request %q, session %q, connection %q; want %q, %q, %q",
			response.RequestID, response.SessionID, response.ConnectionID, conn.RequestID+"/1", s.ID, conn.RequestID)
	}
	if response.AudioInputTokens != 10 || response.AudioOutputTokens != 10 {
		t.Errorf("response's audio tokens %d in, %d out; want 10 and 10", response.AudioInputTokens, response.AudioOutputTokens)
	}
}

// What a response the provider started by itself used before the cancel
// of its refusal landed counts in the session's tokens, not as a turn.
func TestRealtime_CancelledResponseCountsInTheSession(t *testing.T) {
	h := sessionHarness(t, []sluice.Rule{{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute}})
	_, s := h.sessionCall("POST", "/v1/sessions", `{}`, nil)
	c := h.mustDialLive(t, map[string]string{gateway.HeaderSession: s.ID})
	refuseProviderStartedResponse(t, c)
	in, out := usageOf(c.next("response.done"))
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the connection's record", func() bool { return len(h.rec.usage()) == 1 })
	_, got := h.sessionCall("GET", "/v1/sessions/"+s.ID, "", nil)
	if got.Used.Tokens != in+out || got.Used.Turns != 0 {
		t.Fatalf("session used %+v, want the cancelled response's %d tokens and no turn", got.Used, in+out)
	}
}
