package sluice

import (
	"testing"
	"time"
)

// TestRealClock_FollowsTheWallClock: the one-read clock never goes back,
// and stays within a millisecond of time.Now read around it.
func TestRealClock_FollowsTheWallClock(t *testing.T) {
	c := newRealClock()
	var last time.Time
	for range 10_000 {
		before := time.Now()
		got := c.Now()
		after := time.Now()
		if got.Before(last) {
			t.Fatalf("clock went back: %v after %v", got, last)
		}
		if got.Before(before.Add(-time.Millisecond)) || got.After(after.Add(time.Millisecond)) {
			t.Fatalf("Now() = %v, outside [%v, %v]", got, before, after)
		}
		last = got
	}
}

// TestRealClock_Reanchors: an anchor older than reanchorEvery is replaced
// by a fresh read of the wall clock, so a step of the system clock is seen
// within that long.
func TestRealClock_Reanchors(t *testing.T) {
	c := newRealClock()
	old := time.Now().Add(-reanchorEvery - time.Millisecond)
	c.anchor.Store(&old)
	before := time.Now()
	got := c.Now()
	if a := c.anchor.Load(); a == &old || a.Before(before) {
		t.Fatalf("anchor %v kept, want one read at or after %v", a, before)
	}
	if got.Before(before) {
		t.Fatalf("Now() = %v, before %v", got, before)
	}
}
