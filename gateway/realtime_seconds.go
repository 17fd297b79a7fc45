package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicehttp"
)

// MetricSeconds is the custom metric of a live connection's wall-clock
// time: a rule of any kind may limit it (30 minutes per user per day is a
// budget of 1800 seconds). A connection reserves, when it opens, the
// seconds it may stay open (its deadline's, or less when a seconds rule
// has less left, which then ends it), and is charged at close the whole
// seconds it was open.
const MetricSeconds = "seconds"

// secondsRoom is the least room the enforced seconds rules that apply to
// the connection have, and the rule that has it; left is -1 when none
// applies.
type secondsRoom struct {
	left int64
	rule string
}

// secondsLeft reads the room of the seconds rules that apply to the
// connection on m, without charging.
func (c *call) secondsLeft(m *model) (secondsRoom, error) {
	room := secondsRoom{left: -1}
	eff, err := c.g.limiter.Effective(context.Background(), c.identity(m))
	if err != nil {
		return room, err
	}
	for _, e := range eff {
		if e.Metric != MetricSeconds || e.Mode == sluice.ModeShadow || e.Limit <= 0 {
			continue
		}
		if room.left < 0 || e.Remaining < room.left {
			room.left, room.rule = e.Remaining, e.Rule
		}
	}
	return room, nil
}

// reserveSeconds sets the seconds req reserves for the connection: until
// its deadline, or what the seconds rules have left, which then becomes
// its deadline (bound names the rule that ends it).
func (c *call) reserveSeconds(req *sluice.Request, room secondsRoom) (secs int64, bound string) {
	now := c.g.now()
	secs = int64((c.deadline.Sub(now) + time.Second - 1) / time.Second)
	if room.left >= 0 && room.left < secs {
		secs = max(room.left, 1) // none left: refused by the rule itself
		c.deadline = now.Add(time.Duration(secs) * time.Second)
		bound = room.rule
	}
	req.Max.Custom = map[string]int64{MetricSeconds: secs}
	req.Timeout = c.deadline.Sub(now)
	return secs, bound
}

// chargeSeconds sets the seconds the connection is settled with: the
// whole seconds it was open, rounded up, never more than it reserved when
// a seconds rule's room ended it.
func (lc *liveConn) chargeSeconds() {
	secs := max(1, int64((lc.g.since(lc.c.start)+time.Second-1)/time.Second))
	if lc.secondsRule != "" {
		secs = min(secs, lc.seconds)
	}
	lc.c.custom = map[string]int64{MetricSeconds: secs}
}

// secondsSpent ends a connection whose seconds rule ran out.
func (lc *liveConn) secondsSpent() {
	rule := lc.secondsRule
	ev := errorEventOf(liveError{Type: "budget_exceeded", Code: "seconds_exceeded",
		Message: fmt.Sprintf("Rule %q allows no more live-connection seconds now; the connection is closed.", rule),
		Limit:   &sluicehttp.RefusalLimit{Rule: rule, Metric: MetricSeconds, Limit: lc.seconds, Used: lc.seconds}})
	lc.end(websocket.CloseInternalServerErr, closeReason("quota exceeded: "+rule+" seconds reached"), causeSeconds, ev)
}
