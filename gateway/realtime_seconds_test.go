package gateway_test

import (
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// secondsRules are a user's live seconds (150 a day), beside rules that a
// slice of seconds must not touch: a request budget and a concurrency cap
// that the connections alone fill.
func secondsRules(limit int64) []sluice.Rule {
	return []sluice.Rule{
		{Name: "live_seconds", Kind: sluice.KindBudget, Subject: "user", Metric: gateway.MetricSeconds, Limit: limit, Period: sluice.PeriodDay},
		{Name: "requests_daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricRequests, Limit: 2, Period: sluice.PeriodDay},
		{Name: "in_flight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 2},
	}
}

// alive checks that c still relays events.
func alive(t *testing.T, c *liveClient) {
	t.Helper()
	c.send(`{"type":"session.update","session":{"instructions":"still there"}}`)
	c.next("session.updated")
}

func TestRealtime_SecondsAreReservedInSlicesAndChargedExactly(t *testing.T) {
	clock := clocktest.New(time.Now())
	h := startHarness(t, setup{clock: clock, rules: secondsRules(1000)})
	c := h.mustDialLive(t, nil)
	if got := h.used("live_seconds"); got != 60 {
		t.Fatalf("reserved %d seconds at connect, want a slice of 60", got)
	}
	clock.Advance(54 * time.Second)
	if got := h.used("live_seconds"); got != 60 {
		t.Fatalf("reserved %d seconds at 54 s, want still 60", got)
	}
	clock.Advance(time.Second) // 5 s before the slice runs out
	if got := h.used("live_seconds"); got != 120 {
		t.Fatalf("reserved %d seconds at 55 s, want the next slice on top: 120", got)
	}
	clock.Advance(60 * time.Second)
	if got := h.used("live_seconds"); got != 180 {
		t.Fatalf("reserved %d seconds at 115 s, want 180", got)
	}
	if got := h.used("requests_daily"); got != 1 {
		t.Fatalf("requests counted %d, want 1: a slice is not a request", got)
	}
	alive(t, c)
	clock.Advance(34*time.Second + 300*time.Millisecond)
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the connection charged its 150 whole seconds", func() bool { return h.used("live_seconds") == 150 })
}

// Two connections of one user share the user's seconds as they use them:
// neither takes them all at connect; the one whose next slice finds none
// left is closed when its seconds run out, the other goes on with what is
// left.
func TestRealtime_ConcurrentConnectionsShareTheSeconds(t *testing.T) {
	clock := clocktest.New(time.Now())
	h := startHarness(t, setup{clock: clock, rules: secondsRules(150)})
	a := h.mustDialLive(t, nil)
	b := h.mustDialLive(t, nil)
	if got := h.used("live_seconds"); got != 120 {
		t.Fatalf("reserved %d seconds for two connections, want a slice of 60 each", got)
	}
	clock.Advance(55 * time.Second)
	// a's next slice takes the 30 s left; b's finds none, and is tried
	// again when b's seconds run out.
	if got := h.used("live_seconds"); got != 150 {
		t.Fatalf("reserved %d seconds at 55 s, want all 150", got)
	}
	alive(t, a)
	alive(t, b)
	clock.Advance(5 * time.Second)
	if e := errorOf(b.next("error")); e["code"] != "seconds_exceeded" || e["limit"].(map[string]any)["rule"] != "live_seconds" {
		t.Fatalf("error %v, want the seconds budget named", e)
	}
	quotaClose(t, b.closed())
	alive(t, a)
	clock.Advance(30 * time.Second)
	if e := errorOf(a.next("error")); e["code"] != "seconds_exceeded" {
		t.Fatalf("error %v", e)
	}
	quotaClose(t, a.closed())
	eventually(t, "60 + 90 s charged", func() bool { return h.used("live_seconds") == 150 })
	if got := h.used("requests_daily"); got != 2 {
		t.Fatalf("requests counted %d, want the 2 connections alone", got)
	}
	eventually(t, "one record per connection", func() bool { return len(h.rec.usage()) == 2 })
}

// A clock that jumps past several slices at once (a replica whose timers
// ran late) tops up every slice it passed, and charges the seconds open.
func TestRealtime_SecondsToppedUpWhenTheClockJumps(t *testing.T) {
	clock := clocktest.New(time.Now())
	h := startHarness(t, setup{clock: clock, rules: secondsRules(1000)})
	c := h.mustDialLive(t, nil)
	clock.Advance(150 * time.Second)
	if got := h.used("live_seconds"); got != 180 {
		t.Fatalf("reserved %d seconds at 150 s, want 3 slices: 180", got)
	}
	alive(t, c)
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the connection charged its 150 s", func() bool { return h.used("live_seconds") == 150 })
}
