package gateway

import "time"

// Clock tells the gateway the time and runs its timers: every deadline,
// backoff, pacing hold and settlement retry goes through it. A nil Clock
// (Options.Clock) means real time. Network reads and writes are bounded in
// real time by the deadlines the clock computes.
type Clock interface {
	Now() time.Time
	// After waits for d, as time.After.
	After(d time.Duration) <-chan time.Time
	// AfterFunc runs f once d has passed, unless stop is called first;
	// stop reports whether it stopped f, as (*time.Timer).Stop.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// realClock is real time.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// now is the gateway's time.
func (g *Gateway) now() time.Time { return g.clock.Now() }

// since is the time elapsed since t on the gateway's clock.
func (g *Gateway) since(t time.Time) time.Duration { return g.clock.Now().Sub(t) }

// sleep waits for d on the gateway's clock, or until done is closed (nil:
// never); it reports whether d passed.
func (g *Gateway) sleep(d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	select {
	case <-g.clock.After(d):
		return true
	case <-done:
		return false
	}
}
