package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/retry"
)

// quotaClose checks a close is the terminal one of a ceiling or budget.
func quotaClose(t *testing.T, ce websocket.CloseError) {
	t.Helper()
	if ce.Code != 1011 || !strings.Contains(ce.Reason, "quota exceeded") || len(ce.Reason) > 123 {
		t.Fatalf("closed %d %q, want 1011 with quota exceeded", ce.Code, ce.Reason)
	}
	if d := retry.ClassifyClose(int(ce.Code), ce.Reason); d.Class != retry.Terminal {
		t.Fatalf("the close classifies %s, want terminal", d.Class)
	}
}

func TestRealtime_WallClockCeilingClosesTheSession(t *testing.T) {
	clock := clocktest.New(time.Now())
	h := sessionHarness(t, nil, func(o *gateway.Options) { o.Clock = clock })
	_, s := h.sessionCall("POST", "/v1/sessions", `{"max_duration_seconds":3}`, nil)
	c := h.mustDialLive(t, map[string]string{gateway.HeaderSession: s.ID})
	c.send(`{"type":"response.create","response":{"max_output_tokens":3}}`)
	c.next("response.done")
	clock.Advance(2 * time.Second)
	c.send(`{"type":"session.update","session":{"instructions":"two seconds in"}}`)
	c.next("session.updated") // still open
	reached := time.Now()
	clock.Advance(time.Second)
	e := errorOf(c.next("error"))
	if e["code"] != "session_ceiling_reached" || e["limit"].(map[string]any)["rule"] != "session_wall_clock" {
		t.Fatalf("error %v, want the session's wall clock named", e)
	}
	quotaClose(t, c.closed())
	if took := time.Since(reached); took > time.Second {
		t.Fatalf("closed %s after the ceiling was reached, want within 1 s", took)
	}
	eventually(t, "the mock's side closed", func() bool { return h.mock.RealtimeStats().Open == 0 })
}

func TestRealtime_SpentBudgetClosesTheSession(t *testing.T) {
	budget := sluice.Rule{Name: "tokens_daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{budget})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"response.create","response":{"max_output_tokens":256}}`)
	c.next("response.done")
	// Other calls of the key spend the rest of the budget meanwhile.
	res, err := h.limiter.Admit(t.Context(), sluice.Request{Identity: sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1"},
		Max: sluice.Usage{InputTokens: 743}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Settle(t.Context(), sluice.Usage{InputTokens: 743}); err != nil {
		t.Fatal(err)
	}
	c.send(`{"type":"response.create","response":{"max_output_tokens":1}}`)
	e := errorOf(c.next("error"))
	if e["code"] != "budget_exceeded" || e["limit"].(map[string]any)["rule"] != "tokens_daily" {
		t.Fatalf("error %v, want the budget named", e)
	}
	ce := c.closed()
	quotaClose(t, ce)
	if !strings.Contains(ce.Reason, "tokens_daily") {
		t.Fatalf("reason %q does not name the budget", ce.Reason)
	}
}

func TestRealtime_ConversationOutgrowingABudgetClosesTheSession(t *testing.T) {
	// The first response uses 1 input and 256 output tokens: the whole
	// budget. The conversation alone no longer fits it.
	h := newHarness(t, []sluice.Rule{{Name: "tokens_daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 257, Period: sluice.PeriodDay}})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"response.create","response":{"max_output_tokens":256}}`)
	c.next("response.done")
	c.send(`{"type":"response.create","response":{"max_output_tokens":1}}`)
	if e := errorOf(c.next("error")); e["limit"].(map[string]any)["rule"] != "tokens_daily" {
		t.Fatalf("error %v, want the budget named", e)
	}
	quotaClose(t, c.closed())
}

func TestRealtime_BudgetWithRoomForASmallerResponseKeepsTheConnection(t *testing.T) {
	h := newHarness(t, []sluice.Rule{{Name: "tokens_daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 600, Period: sluice.PeriodDay}})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"response.create","response":{"max_output_tokens":256}}`) // 257 used
	c.next("response.done")
	c.send(`{"type":"response.create","response":{"max_output_tokens":320}}`)
	e := errorOf(c.next("error"))
	if e["code"] != "budget_insufficient" || !strings.Contains(e["message"].(string), "The largest max_output_tokens that fits now is 86.") {
		t.Fatalf("error %v, want the budget's refusal with what fits (343 left, 257 of conversation)", e)
	}
	c.send(`{"type":"response.create","response":{"max_output_tokens":50}}`)
	c.next("response.done")
}

func TestRealtime_BadInputIsAnsweredAndNotForwarded(t *testing.T) {
	h := newHarness(t, nil, func(o *gateway.Options) { o.LiveMaxFrameBytes = 4096 })
	c := h.mustDialLive(t, nil)
	for _, tc := range []struct {
		name  string
		typ   websocket.MessageType
		frame string
		code  string
	}{
		{"not JSON", websocket.MessageText, "hello?", "invalid_event"},
		{"no type", websocket.MessageText, `{"event_id":"x"}`, "invalid_event"},
		{"binary", websocket.MessageBinary, `{"type":"session.update"}`, "invalid_event"},
		{"unknown type", websocket.MessageText, `{"type":"response.create_many","event_id":"e9"}`, "unknown_event"},
		{"bad cap", websocket.MessageText, `{"type":"response.create","response":{"max_output_tokens":"lots"}}`, "invalid_value"},
	} {
		if err := c.conn.Write(t.Context(), tc.typ, []byte(tc.frame)); err != nil {
			t.Fatal(err)
		}
		if e := errorOf(c.next("error")); e["code"] != tc.code {
			t.Errorf("%s: error %v, want %s", tc.name, e, tc.code)
		}
	}
	if n := h.mock.RealtimeStats().ClientEvents; n != 0 {
		t.Fatalf("the provider got %d of those events, want none", n)
	}
	c.send(`{"type":"session.update","session":{"instructions":"fine"}}`)
	c.next("session.updated")
	c.send(`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"` + strings.Repeat("a", 5000) + `"}]}}`)
	if ce := c.closed(); ce.Code != websocket.StatusMessageTooBig {
		t.Fatalf("a frame over the cap closed %d %q, want 1009", ce.Code, ce.Reason)
	}
	eventually(t, "the mock's side closed", func() bool { return h.mock.RealtimeStats().Open == 0 })
}

func TestRealtime_ClientGoneClosesTheProviderAndIsCharged(t *testing.T) {
	h := startHarness(t, setup{rules: liveRules, mock: mockOptions(5 * time.Millisecond)})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"response.create","response":{"max_output_tokens":200}}`)
	for range 3 {
		c.next("response.output_text.delta")
	}
	left := time.Now()
	c.conn.CloseNow()
	eventually(t, "the mock's side closed", func() bool { return h.mock.RealtimeStats().Open == 0 })
	if took := time.Since(left); took > time.Second {
		t.Fatalf("the provider's side closed %s after the client left", took)
	}
	recs := h.rec.waitUsage(t, 2) // the response, then the connection
	r := recs[0]
	if r.OutputTokens < 3 || r.OutputTokens >= 200 || r.Estimated {
		t.Fatalf("the cut response was charged %+v, want its output so far (3 or more deltas, fewer than 200)", r)
	}
	if h.mock.RealtimeStats().Completed != 0 {
		t.Fatal("the response completed: it was not cut")
	}
	eventually(t, "the lease released", func() bool { return h.used("in_flight") == 0 })
	if got := h.used("tokens_daily"); got != r.InputTokens+r.OutputTokens {
		t.Fatalf("budget used %d, want the record's %d", got, r.InputTokens+r.OutputTokens)
	}
}

func TestRealtime_ProviderDropIsATransientClose(t *testing.T) {
	h := newHarness(t, liveRules)
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"[mock cut=2]"}]}}`)
	c.send(`{"type":"response.create","response":{"max_output_tokens":50}}`)
	ce := c.closed()
	if ce.Code != 1011 || strings.Contains(ce.Reason, "quota") || strings.Contains(ce.Reason, "exceeded") {
		t.Fatalf("closed %d %q, want 1011 without quota words", ce.Code, ce.Reason)
	}
	if d := retry.ClassifyClose(int(ce.Code), ce.Reason); !d.Retryable() {
		t.Fatalf("a provider drop classifies %s, want a reconnect", d.Class)
	}
	r := h.rec.waitUsage(t, 2)[0]
	if r.OutputTokens != 2 {
		t.Fatalf("the dropped response was charged %+v, want its 2 deltas of output", r)
	}
}

func TestRealtime_SecondsAreReservedAndChargedAtClose(t *testing.T) {
	clock := clocktest.New(time.Now())
	h := startHarness(t, setup{clock: clock, rules: []sluice.Rule{{Name: "live_seconds", Kind: sluice.KindBudget, Subject: "user",
		Metric: gateway.MetricSeconds, Limit: 60, Period: sluice.PeriodDay}}})
	first := h.mustDialLive(t, nil)
	if got := h.used("live_seconds"); got != 60 {
		t.Fatalf("reserved %d seconds, want the 60 the budget has", got)
	}
	// Its responses, and the key's other calls, use no seconds: the
	// budget the connection holds does not refuse them.
	first.send(`{"type":"response.create","response":{"max_output_tokens":3}}`)
	first.next("response.done")
	if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, nil); r.status != 200 {
		t.Fatalf("a chat call while the seconds are held: %d %s", r.status, r.body)
	}
	clock.Advance(40 * time.Second)
	_ = first.conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the first connection charged its 40 s", func() bool { return h.used("live_seconds") == 40 })

	second := h.mustDialLive(t, nil)
	clock.Advance(19 * time.Second)
	second.send(`{"type":"session.update","session":{"instructions":"19 s in"}}`)
	second.next("session.updated")
	clock.Advance(time.Second)
	e := errorOf(second.next("error"))
	if e["code"] != "seconds_exceeded" || e["limit"].(map[string]any)["rule"] != "live_seconds" {
		t.Fatalf("error %v, want the seconds budget named", e)
	}
	ce := second.closed()
	quotaClose(t, ce)
	eventually(t, "the second connection charged its 20 s", func() bool { return h.used("live_seconds") == 60 })

	if _, resp, err := h.dialLive(t, "mock-small", nil); err == nil || resp == nil || resp.StatusCode == 101 {
		t.Fatalf("a third connection with no seconds left: %v, %v; want a refusal", err, resp)
	}
}

func TestRealtime_ShutdownCutsLiveConnections(t *testing.T) {
	h := startHarness(t, setup{rules: liveRules, mock: mockOptions(5 * time.Millisecond)})
	c := h.mustDialLive(t, nil)
	c.send(`{"type":"response.create","response":{"max_output_tokens":200}}`)
	c.next("response.output_text.delta")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.gw.Drain(ctx); err == nil {
		t.Fatal("Drain returned while a live connection was open")
	}
	h.gw.CutStreams()
	ce := c.closed()
	if ce.Code != websocket.StatusServiceRestart || !retry.ClassifyClose(int(ce.Code), ce.Reason).Retryable() {
		t.Fatalf("closed %d %q, want 1012, reconnectable", ce.Code, ce.Reason)
	}
	if err := h.gw.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if recs := h.rec.usage(); len(recs) != 2 || recs[0].OutputTokens == 0 {
		t.Fatalf("records %+v: want the cut response charged its output so far, then the connection", recs)
	}
}
