package mockprovider

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// dialRealtime opens a live session on the mock.
func dialRealtime(t *testing.T, o Options) (*Server, *websocket.Conn) {
	t.Helper()
	s, ts := start(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/v1/realtime?model=mock-small", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return s, c
}

// next reads events until one of type typ, returning it.
func next(t *testing.T, c *websocket.Conn, typ string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", typ, err)
		}
		var ev map[string]any
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatalf("event %s: %v", b, err)
		}
		if ev["type"] == typ {
			return ev
		}
	}
}

func send(t *testing.T, c *websocket.Conn, ev string) {
	t.Helper()
	if err := c.Write(context.Background(), websocket.MessageText, []byte(ev)); err != nil {
		t.Fatal(err)
	}
}

func TestRealtime_ResponseUsageIsExact(t *testing.T) {
	s, c := dialRealtime(t, Options{})
	next(t, c, "session.created")
	send(t, c, `{"type":"session.update","session":{"type":"realtime","instructions":"12345678","max_output_tokens":7}}`)
	if got := next(t, c, "session.updated")["session"].(map[string]any)["max_output_tokens"]; got != 7.0 {
		t.Fatalf("session max_output_tokens %v", got)
	}
	send(t, c, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"abcd"}]}}`)
	next(t, c, "conversation.item.done")
	send(t, c, `{"type":"response.create"}`)
	done := next(t, c, "response.done")
	u := done["response"].(map[string]any)["usage"].(map[string]any)
	// (8 + 4) bytes / 4 = 3 input tokens; output the session's cap, 7.
	if u["input_tokens"] != 3.0 || u["output_tokens"] != 7.0 || u["total_tokens"] != 10.0 {
		t.Fatalf("usage %v", u)
	}
	// The answer joins the conversation: its 7 tokens are input next time.
	send(t, c, `{"type":"response.create","response":{"max_output_tokens":2}}`)
	u = next(t, c, "response.done")["response"].(map[string]any)["usage"].(map[string]any)
	if u["input_tokens"] != 10.0 || u["output_tokens"] != 2.0 {
		t.Fatalf("second usage %v, want input 3 + 7", u)
	}
	if st := s.RealtimeStats(); st.Responses != 2 || st.Completed != 2 || st.Connections != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRealtime_AudioOutputCountsAudioTokens(t *testing.T) {
	_, c := dialRealtime(t, Options{TokensPerChunk: 5})
	send(t, c, `{"type":"response.create","response":{"max_output_tokens":10,"output_modalities":["audio"]}}`)
	d := next(t, c, "response.output_audio.delta")
	if n := len(d["delta"].(string)); n != 4*5*2400/3 {
		t.Fatalf("audio delta of %d base64 bytes, want 5 tokens' (50 ms each)", n)
	}
	u := next(t, c, "response.done")["response"].(map[string]any)["usage"].(map[string]any)
	if det := u["output_token_details"].(map[string]any); det["audio_tokens"] != 10.0 || det["text_tokens"] != 0.0 {
		t.Fatalf("usage %v", u)
	}
}

func TestRealtime_UnknownEventIsAnError(t *testing.T) {
	_, c := dialRealtime(t, Options{})
	send(t, c, `{"type":"bogus.event","event_id":"e1"}`)
	e := next(t, c, "error")["error"].(map[string]any)
	if e["param"] != "type" || e["event_id"] != "e1" {
		t.Fatalf("error %v", e)
	}
}

func TestRealtime_Directives(t *testing.T) {
	_, c := dialRealtime(t, Options{})
	send(t, c, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"[mock cut=2]"}]}}`)
	send(t, c, `{"type":"response.create"}`)
	next(t, c, "response.output_text.delta")
	next(t, c, "response.output_text.delta")
	_, _, err := c.Read(context.Background())
	if websocket.CloseStatus(err) != -1 || err == nil {
		t.Fatalf("cut: %v, want a dropped connection with no close frame", err)
	}

	_, c = dialRealtime(t, Options{})
	send(t, c, `{"type":"session.update","session":{"instructions":"[mock close=1011]"}}`)
	send(t, c, `{"type":"response.create"}`)
	for {
		if _, _, err = c.Read(context.Background()); err != nil {
			break
		}
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("close directive: %v", err)
	}
	if ce.Code != 1011 {
		t.Fatalf("closed %d, want 1011", ce.Code)
	}
}
