package sluice

import "time"

// Clock tells the Limiter the time. A nil Clock means real time.
//
// The Limiter reads Now once per decision. After is used only while an
// admission waits for a rate or concurrency rule (Request.MaxWait), and by
// RunSweeper between lease renewals (Options.LeaseTimeout).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// realClock is real time.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
