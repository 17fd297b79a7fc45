// Package clocktest is a clock for tests whose time moves only when the
// code under test waits, or the test moves it: a wait of d returns at once,
// with the clock d later. A test of a backoff, a hint or a deadline then
// runs in no real time and reads exactly what was waited. It serves as a
// sluice.Clock, a retry.Clock and a gateway.Clock.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a fake clock. Its zero value is not usable: see New. It is safe
// for concurrent use; waits from several goroutines each move it by their
// own length, one after the other.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	waits  []time.Duration
}

type timer struct {
	at      time.Time
	f       func()
	stopped bool
}

// New returns a clock that reads start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After records a wait of d and moves the clock d forward, running the
// functions of AfterFunc that come due; the channel holds the new time.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- c.Advance(d)
	return ch
}

// AfterFunc runs f once the clock has moved d past now (on the goroutine
// that moves it); stop reports whether it stopped f before it ran.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	t := &timer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	if d <= 0 {
		c.Advance(0)
	}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.stopped {
			return false
		}
		t.stopped = true
		return true
	}
}

// Advance moves the clock d forward (not at all for d <= 0), runs the
// functions of AfterFunc that come due, and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	now := c.now
	var due []func()
	kept := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(now):
			t.stopped = true
			due = append(due, t.f)
		default:
			kept = append(kept, t)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
	return now
}

// Waits returns the waits asked of After so far, in order.
func (c *Clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}
