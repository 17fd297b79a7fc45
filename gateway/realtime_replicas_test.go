package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/redisstore"
)

// One user's 60 seconds a day of live connections, held across two
// gateways on one Redis: a 40 s session on the first leaves 20 s, and the
// second gateway closes the next session when they are spent.
func TestRealtime_SecondsHeldAcrossReplicas(t *testing.T) {
	url := testenv.RedisURL(t)
	prefix := fmt.Sprintf("rt-seconds-%d", time.Now().UnixNano())
	clock := clocktest.New(time.Now())
	rule := sluice.Rule{Name: "live_seconds", Kind: sluice.KindBudget, Subject: "user", Metric: gateway.MetricSeconds, Limit: 60, Period: sluice.PeriodDay}
	replica := func() *harness {
		s, err := redisstore.Open(context.Background(), redisstore.Options{URL: url, Prefix: prefix, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return startHarness(t, setup{store: s, clock: clock, rules: []sluice.Rule{rule}})
	}
	a, b := replica(), replica()

	first := a.mustDialLive(t, nil)
	clock.Advance(40 * time.Second)
	_ = first.conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the first session's 40 s charged", func() bool { return b.used("live_seconds") == 40 })

	second := b.mustDialLive(t, nil)
	if got := a.used("live_seconds"); got != 60 {
		t.Fatalf("the second session reserved up to %d, want the 20 s left on top of 40", got)
	}
	clock.Advance(19 * time.Second)
	second.send(`{"type":"session.update","session":{"instructions":"19 s in"}}`)
	second.next("session.updated")
	clock.Advance(time.Second)
	if e := errorOf(second.next("error")); e["code"] != "seconds_exceeded" {
		t.Fatalf("error %v", e)
	}
	quotaClose(t, second.closed())
	eventually(t, "60 s charged in all", func() bool { return a.used("live_seconds") == 60 })
}
