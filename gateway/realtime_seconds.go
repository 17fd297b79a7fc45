package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicehttp"
)

// MetricSeconds is the custom metric of a live connection's wall-clock
// time: a rule of any kind may limit it (30 minutes per user per day is a
// budget of 1800 seconds).
//
// A connection reserves its seconds as it goes, in slices of
// liveSecondsSlice (fewer when a seconds rule has less left, or its
// deadline is nearer): the first with its admission, each next one
// liveTopUpLead before the last runs out. A top-up is charged to the
// seconds rules alone (sluice.Request.NamedMetricsOnly): it counts no
// request and takes no place. So two connections of one user share the
// user's seconds as they use them, instead of the first taking them all.
// A top-up refused is tried once more when the seconds reserved run out
// (another connection may have given some back by then); refused again,
// it ends the connection with a quota close. At close, the connection is
// charged the whole seconds it was open, across its slices.
const MetricSeconds = "seconds"

const (
	// liveSecondsSlice is the most seconds a connection reserves at a
	// time.
	liveSecondsSlice = 60
	// liveTopUpLead is how long before its seconds run out a connection
	// reserves the next slice (at most half the last slice).
	liveTopUpLead = 5 * time.Second
)

// liveSeconds are the seconds a connection reserved, slice by slice.
type liveSeconds struct {
	mu sync.Mutex
	// first is the slice its admission reserved; topUps are the slices
	// reserved since, in order.
	first  int64
	topUps []secondsSlice
	// reserved is every slice's seconds together.
	reserved int64
	// stop stops the next top-up's timer; closed is set at close, after
	// which no top-up is made.
	stop   func() bool
	closed bool
}

// secondsSlice is one top-up: its reservation and its seconds.
type secondsSlice struct {
	res  *sluice.Reservation
	secs int64
}

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

// secondsSlice is how many seconds the connection's next slice reserves,
// reserved having been so far: liveSecondsSlice, or fewer when its
// deadline is nearer or a seconds rule has less room (at least 1: with
// none left, the rule itself refuses); 0 when the slices reach its
// deadline.
func (c *call) secondsSlice(reserved int64, room secondsRoom) int64 {
	n := min(liveSecondsSlice, wholeSeconds(c.deadline.Sub(c.start))-reserved)
	if n <= 0 {
		return 0
	}
	if room.left >= 0 && room.left < n {
		n = max(room.left, 1)
	}
	return n
}

// wholeSeconds is d in seconds, rounded up.
func wholeSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// startSeconds schedules the slice after the first, which the
// connection's admission reserved, once the connection runs.
func (lc *liveConn) startSeconds() {
	s := &lc.secs
	s.mu.Lock()
	at, ok := lc.nextTopUp(s.first)
	s.mu.Unlock()
	if ok {
		lc.topUpAt(at)
	}
}

// nextTopUp is when to reserve the next slice: liveTopUpLead (at most
// half of last, the slice just reserved) before the seconds reserved run
// out; false when they reach the connection's deadline. lc.secs.mu is
// held.
func (lc *liveConn) nextTopUp(last int64) (time.Time, bool) {
	c, s := lc.c, &lc.secs
	if c.secondsSlice(s.reserved, secondsRoom{left: -1}) == 0 {
		return time.Time{}, false
	}
	lead := min(liveTopUpLead, time.Duration(last)*time.Second/2)
	return c.start.Add(time.Duration(s.reserved)*time.Second - lead), true
}

// topUpAt has topUpSeconds run at at. It is called without lc.secs.mu
// held: a clock whose time is past at runs it at once.
func (lc *liveConn) topUpAt(at time.Time) {
	stop := lc.g.clock.AfterFunc(at.Sub(lc.g.now()), lc.topUpSeconds)
	s := &lc.secs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		stop()
		return
	}
	s.stop = stop
}

// topUpSeconds reserves the connection's next slice of seconds; refused,
// it is tried again when the seconds reserved run out, and refused then,
// the connection ends.
func (lc *liveConn) topUpSeconds() {
	c, s := lc.c, &lc.secs
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	room, err := c.secondsLeft(lc.model)
	n := c.secondsSlice(s.reserved, room)
	if n == 0 {
		s.mu.Unlock()
		return
	}
	var res *sluice.Reservation
	if err == nil {
		res, err = lc.admitSlice(n)
	}
	if err == nil {
		s.topUps = append(s.topUps, secondsSlice{res: res, secs: n})
		s.reserved += n
		at, ok := lc.nextTopUp(n)
		s.mu.Unlock()
		if ok {
			lc.topUpAt(at)
		}
		return
	}
	runOut := c.start.Add(time.Duration(s.reserved) * time.Second)
	s.mu.Unlock()
	if runOut.After(lc.g.now()) {
		// Another connection may have given some back by then.
		lc.topUpAt(runOut)
		return
	}
	lc.secondsSpent(err)
}

// admitSlice admits n more seconds for the connection, charged to the
// rules on seconds alone, held until its deadline.
func (lc *liveConn) admitSlice(n int64) (*sluice.Reservation, error) {
	c := lc.c
	req := sluice.Request{Identity: c.identity(lc.model), NamedMetricsOnly: true,
		Max: sluice.Usage{Custom: map[string]int64{MetricSeconds: n}}, Timeout: max(c.deadline.Sub(lc.g.now()), time.Second)}
	return lc.g.limiter.Admit(context.Background(), req)
}

// chargeSeconds settles the connection's seconds at close: the whole
// seconds it was open (never more than it reserved when its seconds ran
// out), charged slice by slice in order, the last slice taking any
// overrun; the first slice's share goes with the connection's own
// settlement, a top-up with no share is given back.
func (lc *liveConn) chargeSeconds() {
	s := &lc.secs
	s.mu.Lock()
	s.closed = true
	if s.stop != nil {
		s.stop()
	}
	first, topUps, reserved := s.first, s.topUps, s.reserved
	s.mu.Unlock()
	left := max(1, wholeSeconds(lc.g.since(lc.c.start)))
	if lc.closeCause == causeSeconds {
		left = min(left, reserved)
	}
	share := left
	if len(topUps) > 0 {
		share = min(left, first)
	}
	lc.c.custom = map[string]int64{MetricSeconds: share}
	left -= share
	for i, t := range topUps {
		share = min(left, t.secs)
		if i == len(topUps)-1 {
			share = left
		}
		left -= share
		lc.endSlice(t.res, share)
	}
}

// endSlice settles a top-up with secs (none: given back); a store that
// fails is retried as a call's settlement is.
func (lc *liveConn) endSlice(res *sluice.Reservation, secs int64) {
	p := pendingEnd{res: res, release: secs == 0, usage: sluice.Usage{Custom: map[string]int64{MetricSeconds: secs}},
		requestID: lc.c.event.RequestID, model: lc.model.Name}
	var err error
	if p.release {
		err = res.Release(context.Background())
	} else {
		err = res.Settle(context.Background(), p.usage)
	}
	if err != nil {
		lc.g.log.Error("settling a slice of live seconds failed; retrying until its deadline", "request_id", p.requestID, "err", err)
		go lc.g.retryEnd(context.Background(), p)
	}
}

// secondsSpent ends a connection whose seconds ran out, refused the next
// slice by err: a seconds rule's refusal is a quota close, a store that
// cannot answer a transient one.
func (lc *liveConn) secondsSpent(err error) {
	hr, ok := sluicehttp.RefusalOf(err)
	if !ok || errors.Is(err, sluice.ErrStoreUnavailable) || hr.Limit == nil {
		lc.g.log.Error("topping up a live connection's seconds failed", "request_id", lc.c.event.RequestID, "err", err)
		lc.end(websocket.CloseTryAgainLater, "limit store unavailable; retry later", causeStore, nil)
		return
	}
	rule := hr.Limit.Rule
	ev := errorEventOf(liveError{Type: "budget_exceeded", Code: "seconds_exceeded",
		Message: fmt.Sprintf("Rule %q allows no more live-connection seconds now; the connection is closed.", rule), Limit: hr.Limit})
	lc.end(websocket.CloseInternalServerErr, closeReason("quota exceeded: "+rule+" seconds reached"), causeSeconds, ev)
}
