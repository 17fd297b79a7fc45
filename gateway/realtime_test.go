package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/retry"
)

// liveClient is a Go WebSocket client of the gateway's /v1/realtime.
type liveClient struct {
	t    *testing.T
	conn *websocket.Conn
}

// dialLive connects to model with the harness's key (unless headers set
// Authorization), or fails the test; the handshake's refusal, when there
// is one, is returned instead.
func (h *harness) dialLive(t *testing.T, model string, headers map[string]string) (*liveClient, *http.Response, error) {
	t.Helper()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+testKey)
	for k, v := range headers {
		hdr.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/realtime?model="+model, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(4 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &liveClient{t: t, conn: c}, resp, nil
}

// mustDialLive connects to mock-small and reads session.created.
func (h *harness) mustDialLive(t *testing.T, headers map[string]string) *liveClient {
	t.Helper()
	lc, resp, err := h.dialLive(t, "mock-small", headers)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	lc.next("session.created")
	return lc
}

func (c *liveClient) send(ev string) {
	c.t.Helper()
	if err := c.conn.Write(context.Background(), websocket.MessageText, []byte(ev)); err != nil {
		c.t.Fatalf("send %s: %v", ev, err)
	}
}

// next reads events until one of type typ and returns it.
func (c *liveClient) next(typ string) map[string]any {
	c.t.Helper()
	ev, err := c.read(typ)
	if err != nil {
		c.t.Fatalf("waiting for %s: %v", typ, err)
	}
	return ev
}

func (c *liveClient) read(typ string) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		_, b, err := c.conn.Read(ctx)
		if err != nil {
			return nil, err
		}
		var ev map[string]any
		if err := json.Unmarshal(b, &ev); err != nil {
			c.t.Fatalf("event %s: %v", b, err)
		}
		if ev["type"] == typ {
			return ev, nil
		}
	}
}

// closed reads until the connection closes and returns its close.
func (c *liveClient) closed() websocket.CloseError {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if _, _, err := c.conn.Read(ctx); err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				c.t.Fatalf("connection ended without a close frame: %v", err)
			}
			return ce
		}
	}
}

// errorOf is the error object of an error event.
func errorOf(ev map[string]any) map[string]any { return ev["error"].(map[string]any) }

// usageOf is the usage of a response.done.
func usageOf(ev map[string]any) (input, output int64) {
	u := ev["response"].(map[string]any)["usage"].(map[string]any)
	return int64(u["input_tokens"].(float64)), int64(u["output_tokens"].(float64))
}

// refuseProviderStartedResponse turns on the provider's turn detection
// and commits a little audio, so that the provider starts a response by
// itself, and checks that the rules (a requests rate already spent)
// refuse it with a rate_limit_exceeded error event.
func refuseProviderStartedResponse(t *testing.T, c *liveClient) {
	t.Helper()
	c.send(`{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":{"type":"server_vad"}}}}}`)
	c.next("session.updated")
	c.send(`{"type":"input_audio_buffer.append","audio":"AAAA"}`)
	c.send(`{"type":"input_audio_buffer.commit"}`)
	if e := errorOf(c.next("error")); e["code"] != "rate_limit_exceeded" {
		t.Fatalf("error %v, want the rate limit", e)
	}
}

var liveRules = []sluice.Rule{
	{Name: "tokens_daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
	{Name: "in_flight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1},
}

func TestRealtime_ResponseIsSettledWithItsUsage(t *testing.T) {
	h := newHarness(t, liveRules)
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"session.update","session":{"type":"realtime","instructions":"Be brief.","max_output_tokens":5}}`)
	c.next("session.updated")
	c.send(`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"Hello there."}]}}`)
	c.next("conversation.item.done")
	c.send(`{"type":"response.create"}`)
	c.next("response.output_text.delta")
	in, out := usageOf(c.next("response.done"))
	if out != 5 {
		t.Fatalf("output %d, want the session's cap of 5", out)
	}
	// Settled before response.done was passed on.
	recs := h.rec.usage()
	if len(recs) != 1 {
		t.Fatalf("%d records at response.done, want 1", len(recs))
	}
	r := recs[0]
	if r.Route != "realtime" || r.Model != "mock-small" || r.InputTokens != in || r.OutputTokens != out || r.Estimated ||
		r.Cost != testModels[0].Price.Cost(sluice.Usage{InputTokens: in, OutputTokens: out}) {
		t.Fatalf("record %+v, want the mock's usage %d+%d", r, in, out)
	}
	if got := h.used("tokens_daily"); got != in+out {
		t.Fatalf("budget used %d, want %d", got, in+out)
	}
	// The connection holds its place on the concurrency rule, and the
	// response took none of its own.
	if got := h.used("in_flight"); got != 1 {
		t.Fatalf("in flight %d while connected, want 1", got)
	}
	// It is listed, for the console, while open.
	if live := h.gw.LiveList(); len(live) != 1 || live[0].Model != "mock-small" || live[0].Workspace != "w1" || live[0].Responses != 1 {
		t.Fatalf("live connections %+v, want this one, with its response", live)
	}
	_ = c.conn.Close(websocket.StatusNormalClosure, "done")
	eventually(t, "the connection's lease released", func() bool { return h.used("in_flight") == 0 })
	eventually(t, "the connection no longer listed", func() bool { return len(h.gw.LiveList()) == 0 })
	eventually(t, "the mock's side closed", func() bool { return h.mock.RealtimeStats().Open == 0 })
	// The connection's own event says how it ended: the client's close.
	var conn gateway.Event
	for _, ev := range h.rec.waitEvents(t, 2) {
		if ev.LiveClose != 0 {
			conn = ev
		}
	}
	if conn.LiveClose != 1000 || conn.LiveCause != "client_gone" || conn.Status != 101 || conn.Route != "realtime" {
		t.Fatalf("connection event %+v, want the client's 1000", conn)
	}
}

func TestRealtime_ConnectionIsACallInFlight(t *testing.T) {
	h := newHarness(t, liveRules)
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"response.create","response":{"max_output_tokens":3}}`)
	c.next("response.done")
	_, resp, err := h.dialLive(t, "mock-small", nil)
	if err == nil || resp == nil || resp.StatusCode != 429 {
		t.Fatalf("second connection: %v, %v; want 429 from the concurrency rule", err, resp)
	}
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the lease released", func() bool { return h.used("in_flight") == 0 })
	h.mustDialLive(t, nil)
}

func TestRealtime_RefusalsBeforeTheUpgrade(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct {
		name    string
		model   string
		headers map[string]string
		status  int
	}{
		{"bad key", "mock-small", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"unknown model", "gpt-nope", nil, 404},
		{"no model", "", nil, 400},
		{"model not allowed", "mock-large", map[string]string{"Authorization": "Bearer sk-sluice-other"}, 403},
	} {
		_, resp, err := h.dialLive(t, tc.model, tc.headers)
		if err == nil || resp == nil || resp.StatusCode != tc.status {
			t.Errorf("%s: %v, %v; want %d", tc.name, err, resp, tc.status)
		}
	}
	r := h.get("/v1/realtime?model=mock-small", nil)
	if r.status != 426 {
		t.Fatalf("GET without upgrade: %d %s, want 426", r.status, r.body)
	}
}

func TestRealtime_ThrottledResponseKeepsTheConnection(t *testing.T) {
	// The connection counts one request, each response one more.
	h := newHarness(t, []sluice.Rule{{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 2, Window: time.Minute}})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"response.create","response":{"max_output_tokens":3}}`)
	c.next("response.done")
	c.send(`{"type":"response.create","event_id":"ev-2","response":{"max_output_tokens":3}}`)
	e := errorOf(c.next("error"))
	if e["code"] != "rate_limit_exceeded" || e["event_id"] != "ev-2" || e["retry_after_ms"].(float64) <= 0 ||
		e["limit"].(map[string]any)["rule"] != "rpm" {
		t.Fatalf("error %v: want the rate limit named, with its retry hint", e)
	}
	c.send(`{"type":"session.update","session":{"instructions":"still here"}}`)
	c.next("session.updated")
	if n := h.mock.RealtimeStats().Responses; n != 1 {
		t.Fatalf("the provider saw %d responses, want 1 (the refused one not forwarded)", n)
	}
}

func TestRealtime_TokenCeilingClosesWithQuotaExceeded(t *testing.T) {
	h := sessionHarness(t, nil)
	_, s := h.sessionCall("POST", "/v1/sessions", `{"max_tokens":600}`, nil)
	c := h.mustDialLive(t, map[string]string{gateway.HeaderSession: s.ID})
	c.send(`{"type":"response.create","response":{"max_output_tokens":256}}`)
	c.next("response.done") // 257 used
	// With room for a smaller response, a large one is refused alone.
	c.send(`{"type":"response.create","response":{"max_output_tokens":400}}`)
	if e := errorOf(c.next("error")); e["code"] != "session_ceiling_reached" {
		t.Fatalf("error %v, want the session's token ceiling", e)
	}
	c.send(`{"type":"response.create","response":{"max_output_tokens":50}}`)
	if in, out := usageOf(c.next("response.done")); in != 256 || out != 50 {
		t.Fatalf("second response used %d+%d, want the first's 256 answered tokens and 50", in, out)
	}
	// 563 used, 37 left: less than the conversation alone (306).
	c.send(`{"type":"response.create","response":{"max_output_tokens":1}}`)
	e := errorOf(c.next("error"))
	if e["code"] != "session_ceiling_reached" || e["limit"].(map[string]any)["rule"] != "session_tokens" {
		t.Fatalf("error %v, want the session's token ceiling named", e)
	}
	ce := c.closed()
	if ce.Code != 1011 || !strings.Contains(ce.Reason, "quota exceeded") || len(ce.Reason) > 123 {
		t.Fatalf("closed %d %q, want 1011 with quota exceeded", ce.Code, ce.Reason)
	}
	if d := retry.ClassifyClose(int(ce.Code), ce.Reason); d.Class != retry.Terminal {
		t.Fatalf("the close classifies %s, want terminal", d.Class)
	}
	eventually(t, "the mock's side closed", func() bool { return h.mock.RealtimeStats().Open == 0 })
}

func TestRealtime_ResponseTheProviderStartsIsAdmittedAndSettled(t *testing.T) {
	h := newHarness(t, liveRules)
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"session.update","session":{"type":"realtime","max_output_tokens":4,"audio":{"input":{"turn_detection":{"type":"server_vad"}}}}}`)
	c.next("session.updated")
	second := strings.Repeat("A", 64_000) // a second of 24 kHz audio, base64
	c.send(`{"type":"input_audio_buffer.append","audio":"` + second + `"}`)
	c.send(`{"type":"input_audio_buffer.commit"}`)
	in, out := usageOf(c.next("response.done"))
	recs := h.rec.usage()
	if len(recs) != 1 || recs[0].InputTokens != in || recs[0].OutputTokens != out || in != 10 || out != 4 {
		t.Fatalf("records %+v: want the response no response.create asked for charged its 10+4 tokens", recs)
	}
	if recs[0].Reserved.InputTokens < 10 {
		t.Fatalf("reserved %+v: want the second of audio appended (10 tokens) in the worst case", recs[0].Reserved)
	}
}

func TestRealtime_RefusedResponseTheProviderStartsIsCancelledAndCharged(t *testing.T) {
	// The connection takes the one request a minute.
	h := newHarness(t, []sluice.Rule{{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute},
		{Name: "tokens_daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}},
		func(o *gateway.Options) { o.Models[0].Price = sluice.Price{Input: 4_000_000, Output: 16_000_000} })
	c := h.mustDialLive(t, nil)
	refuseProviderStartedResponse(t, c)
	// The mock answers whole before it reads the cancel: the response
	// ends, and the connection goes on.
	in, out := usageOf(c.next("response.done"))
	eventually(t, "the cancel sent to the provider", func() bool { return h.mock.RealtimeStats().ClientEvents == 4 })
	if recs := h.rec.usage(); len(recs) != 0 {
		t.Fatalf("records %+v, want none while the connection is open", recs)
	}
	// What the provider did before the cancel landed is charged with the
	// connection, at its close: to the budget and in its record.
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the connection's record", func() bool { return len(h.rec.usage()) == 1 })
	r := h.rec.usage()[0]
	if in+out == 0 || r.InputTokens != in || r.OutputTokens != out || r.Cost != in*4+out*16 {
		t.Fatalf("connection's record %+v, want the cancelled response's %d+%d tokens and their cost", r, in, out)
	}
	if got := h.used("tokens_daily"); got != in+out {
		t.Fatalf("tokens charged %d, want %d", got, in+out)
	}
}

// A connection that ends before a cancelled response's response.done
// charges that response its input estimate and the output seen so far, as
// an abandoned stream is.
func TestRealtime_CancelledResponseCutByTheCloseIsCharged(t *testing.T) {
	// The mock answers a response whole, a delta every 5 ms, before it
	// reads the cancel.
	h := startHarness(t, setup{mock: mockOptions(5 * time.Millisecond), rules: []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute},
		{Name: "tokens_daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}}})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"session.update","session":{"type":"realtime","instructions":"[mock tokens=200]","audio":{"input":{"turn_detection":{"type":"server_vad"}}}}}`)
	c.next("session.updated")
	c.send(`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"` + strings.Repeat("x", 300) + `"}]}}`)
	c.send(`{"type":"input_audio_buffer.append","audio":"AAAA"}`)
	c.send(`{"type":"input_audio_buffer.commit"}`)
	if e := errorOf(c.next("error")); e["code"] != "rate_limit_exceeded" {
		t.Fatalf("error %v, want the rate limit", e)
	}
	for range 3 {
		c.next("response.output_text.delta")
	}
	c.conn.CloseNow()
	eventually(t, "the connection's record", func() bool { return len(h.rec.usage()) == 1 })
	r := h.rec.usage()[0]
	if h.mock.RealtimeStats().Completed != 0 {
		t.Fatal("the response completed: it was not cut")
	}
	if r.InputTokens < 100 || r.OutputTokens < 3 || r.OutputTokens >= 200 {
		t.Fatalf("connection's record %+v, want the cut response's input estimate (100 tokens of text) and its output so far", r)
	}
	if got := h.used("tokens_daily"); got != r.InputTokens+r.OutputTokens {
		t.Fatalf("tokens charged %d, want the record's %d", got, r.InputTokens+r.OutputTokens)
	}
}

func TestRealtime_AudioIsPricedAtItsOwnRates(t *testing.T) {
	h := newHarness(t, nil, func(o *gateway.Options) {
		o.Models[0].Price = sluice.Price{Input: 4_000_000, CachedInput: 400_000, Output: 16_000_000, AudioInput: 32_000_000, AudioOutput: 64_000_000}
	})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"session.update","session":{"type":"realtime","output_modalities":["audio"]}}`)
	c.next("session.updated")
	c.send(`{"type":"input_audio_buffer.append","audio":"` + strings.Repeat("A", 64_000) + `"}`) // one second
	c.send(`{"type":"input_audio_buffer.commit"}`)
	c.send(`{"type":"response.create","response":{"max_output_tokens":10}}`)
	in, out := usageOf(c.next("response.done"))
	r := h.rec.usage()[0]
	// 10 tokens of audio in, 10 out.
	if in != 10 || out != 10 || r.Cost != 10*32+10*64 {
		t.Fatalf("usage %d+%d, cost %d: want 10 audio tokens each way at the audio rates (960)", in, out, r.Cost)
	}
}

func TestRealtime_AudioRatesBoundTheReservation(t *testing.T) {
	// 10 tokens in (a second of audio) and 10 out cost 200 micro-dollars
	// as text, 960 as audio: a response that may be all audio does not fit
	// a budget of 500.
	h := newHarness(t, []sluice.Rule{{Name: "cost_daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricCost, Limit: 500, Period: sluice.PeriodDay}},
		func(o *gateway.Options) {
			o.Models[0].Price = sluice.Price{Input: 4_000_000, Output: 16_000_000, AudioInput: 32_000_000, AudioOutput: 64_000_000}
		})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"input_audio_buffer.append","audio":"` + strings.Repeat("A", 64_000) + `"}`)
	c.send(`{"type":"response.create","response":{"max_output_tokens":10}}`)
	e := errorOf(c.next("error"))
	if l := e["limit"].(map[string]any); l["rule"] != "cost_daily" || l["requested"] != 960.0 {
		t.Fatalf("error %v, want the cost budget refusing 960", e)
	}
}
