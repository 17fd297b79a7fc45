package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// An admission whose caller stopped waiting (the store's timeout, or its
// context) may still be in a socket, and Redis runs it when it resumes. Two
// guards make sure it holds nothing afterwards: the script refuses an
// admission that comes after its give-up time, read on the server's clock,
// and a cancellation by admission ID, sent when the caller gives up,
// undoes one that was applied anyway. The cancellation applies only once
// the server's clock is past the give-up time (it is sent again until it
// is), so that an admission still on its way is refused rather than left
// behind it.

// errLate is the error of an admission that reached the server after its
// give-up time: the caller's wait outlasted the bound the store sent.
var errLate = errors.New("admission reached Redis after its caller's deadline")

// clockOffset bounds how far a server's clock is ahead of the local one,
// in microseconds: the server's TIME in a reply minus the local time the
// request was sent, which is never less than the true offset. It keeps the
// tightest bound seen, and takes a looser one when a reply proves it too
// small (its TIME minus the local time it arrived is more: a clock was
// stepped) or once it is older than offsetMaxAge (drift).
type clockOffset struct {
	mu     sync.Mutex
	known  bool
	offset int64
	at     time.Time
}

const offsetMaxAge = 10 * time.Second

// observe takes a reply's TIME (µs) and the local times its request was
// sent and its reply arrived.
func (c *clockOffset) observe(server int64, sent, arrived time.Time) {
	upper, lower := server-sent.UnixMicro(), server-arrived.UnixMicro()
	c.mu.Lock()
	if !c.known || upper <= c.offset || lower > c.offset || sent.Sub(c.at) > offsetMaxAge {
		c.known, c.offset, c.at = true, upper, sent
	}
	c.mu.Unlock()
}

func (c *clockOffset) get() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset, c.known
}

// serverTime returns local time t in the clock of the server of slot (µs),
// late rather than early: a script that reads a later TIME knows that t has
// passed here. A slot not heard from yet uses the Store's bound.
func (s *Store) serverTime(slot int, t time.Time) int64 {
	offset, ok := s.lanes[slot].clock.get()
	if !ok {
		offset, _ = s.clock.get()
	}
	return t.UnixMicro() + offset
}

// seedClock reads the server's TIME once, so that the first admissions have
// a give-up time too.
func (s *Store) seedClock(ctx context.Context) error {
	sent := time.Now()
	v, err := s.client.Do(ctx, s.client.B().Time().Build()).AsIntSlice()
	if err != nil {
		return err
	}
	if len(v) != 2 {
		return errors.New("TIME returned an unexpected reply")
	}
	s.clock.observe(v[0]*1_000_000+v[1], sent, time.Now())
	return nil
}

// mayHaveRun reports whether an operation that failed with err may have
// reached the server: not when the server answered with an error, nor when
// no connection could be made.
func mayHaveRun(err error) bool {
	if _, ok := rueidis.IsRedisErr(err); ok {
		return false
	}
	var ne *net.OpError
	return !(errors.As(err, &ne) && ne.Op == "dial")
}

// maxCancels bounds the cancellations outstanding at once; past it, an
// admission that timed out is left to its lease expiry and the sweep.
const maxCancels = 10_000

// Retry pauses of a cancellation that got no answer.
const (
	cancelRetryMin = 50 * time.Millisecond
	cancelRetryMax = time.Second
)

// cancelLater cancels the admission of group g, whose caller gave up, from
// a goroutine of its own: it sends the cancellation until the server takes
// it or until the batch's deadline, when leases have expired and the sweep
// settles budgets. A group with neither a reservation record nor a lease
// cannot tell whether it was applied and is not cancelled: its rate charges
// refill.
func (s *Store) cancelLater(now time.Time, b *sluice.Batch, p *plan, g *group, giveUp int64) {
	o := s.buildCancel(now, b, p, g, giveUp)
	if o == nil {
		return
	}
	if s.cancels.Add(1) > maxCancels {
		s.cancels.Add(-1)
		s.abandoned.Add(1)
		return
	}
	until, slot := time.Now().Add(b.Deadline.Sub(now)), g.slot
	s.cancelWG.Add(1)
	go func() {
		defer s.cancelWG.Done()
		defer s.cancels.Add(-1)
		if !s.cancel(o, slot, giveUp, until) {
			s.abandoned.Add(1)
		}
	}()
}

// cancel sends the cancellation o until it is taken; it reports false when
// it gave up (the Store closing, or past until).
func (s *Store) cancel(o *op, slot int, giveUp int64, until time.Time) bool {
	pause, retry := time.Duration(0), cancelRetryMin
	for {
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-s.closing:
				t.Stop()
				return false
			case <-t.C:
			}
		}
		if time.Now().After(until) {
			return false
		}
		// The lane rewrites an operation's blob: each attempt sends a copy.
		try := &op{typ: o.typ, keys: o.keys, blob: append([]byte(nil), o.blob...), n: o.n, pinned: o.pinned}
		err := s.do(s.stopCtx, time.Now().Add(s.timeout), slot, try)
		switch {
		case err != nil:
			if s.stopCtx.Err() != nil {
				return false
			}
			pause, retry = retry, min(2*retry, cancelRetryMax)
		case try.result == resultLate:
			// Before the give-up time: the admission may still come (and
			// will be refused), or may have run; ask again just after.
			pause = time.Duration(giveUp-try.real+1000) * time.Microsecond
		default:
			if try.result == "\x01" {
				s.phantoms.Add(1)
			}
			return true
		}
	}
}

// buildCancel encodes the cancellation of one group's admission: a release
// that applies only if the admission was, known by its reservation record
// or its first lease; nil for a group that has neither.
func (s *Store) buildCancel(now time.Time, b *sluice.Batch, p *plan, g *group, giveUp int64) *op {
	known := g.indexed
	for _, i := range g.idx {
		known = known || b.Charges[i].Kind == sluice.KindConcurrency
	}
	if !known {
		return nil
	}
	o := s.buildSettle(now, b, p, g, true)
	if o == nil {
		return nil
	}
	o.typ = opCancel
	setNum(o.blob, typeAt, int64(opCancel))
	setNum(o.blob, giveUpAt, giveUp)
	return o
}
