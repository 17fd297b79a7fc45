package sluice

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/cacheline"
)

// Clock tells the Limiter the time. A nil Clock means real time.
//
// The Limiter reads Now once per decision. After is used only while an
// admission waits for a rate or concurrency rule (Request.MaxWait).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// reanchorEvery is how often realClock reads the wall clock again: a step
// of the system clock (set by hand, or by NTP after a suspend) reaches the
// Limiter within this long.
const reanchorEvery = time.Second

// realClock is real time read with one clock read rather than time.Now's
// two (wall and monotonic): the wall time of an anchor plus the monotonic
// time since it. On the machines measured that halves what reading the
// time costs (about 43 to 23 ns), a tenth of an admission. Between two
// anchors the result follows the monotonic clock, which the kernel slews
// as it slews the wall clock; only a step goes unseen, for at most
// reanchorEvery.
//
// Every admission reads the clock and its anchor: each has a cache line of
// its own (see internal/cacheline).
type realClock struct {
	anchor atomic.Pointer[anchor]
	_      [cacheline.Size - unsafe.Sizeof(atomic.Pointer[anchor]{})]byte
}

// anchor is one reading of the wall clock, with its monotonic reading, and
// the same instant in Unix nanoseconds.
type anchor struct {
	t    time.Time
	unix int64
	_    [cacheline.Size - unsafe.Sizeof(time.Time{}) - 8]byte
}

func newRealClock() *realClock {
	c := &realClock{}
	c.reanchor()
	return c
}

func (c *realClock) reanchor() *anchor {
	now := time.Now()
	a := &anchor{t: now, unix: now.UnixNano()}
	c.anchor.Store(a)
	return a
}

// since returns the anchor in force and the monotonic time since it.
func (c *realClock) since() (*anchor, time.Duration) {
	a := c.anchor.Load()
	if d := time.Since(a.t); d >= 0 && d < reanchorEvery {
		return a, d
	}
	return c.reanchor(), 0
}

func (c *realClock) Now() time.Time {
	a, d := c.since()
	return a.t.Add(d)
}

// nanos is Now in Unix nanoseconds, without building a time.Time.
func (c *realClock) nanos() int64 {
	a, d := c.since()
	return a.unix + int64(d)
}

func (*realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
