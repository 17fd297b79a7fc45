package sluice

import (
	"testing"
	"time"
)

// TestRealClock_FollowsTheWallClock: the one-read clock never goes back,
// in either form, and stays within a millisecond of time.Now read around
// it.
func TestRealClock_FollowsTheWallClock(t *testing.T) {
	c := newRealClock()
	var last int64
	for i := range 10_000 {
		before := time.Now()
		var got time.Time
		if i%2 == 0 {
			got = c.Now()
		} else {
			got = time.Unix(0, c.nanos())
		}
		after := time.Now()
		if got.UnixNano() < last {
			t.Fatalf("clock went back: %v after %v", got, time.Unix(0, last))
		}
		if got.Before(before.Add(-time.Millisecond)) || got.After(after.Add(time.Millisecond)) {
			t.Fatalf("read %d = %v, outside [%v, %v]", i, got, before, after)
		}
		last = got.UnixNano()
	}
}

// TestRealClock_Reanchors: an anchor older than reanchorEvery is replaced
// by a fresh read of the wall clock, so a step of the system clock is seen
// within that long.
func TestRealClock_Reanchors(t *testing.T) {
	c := newRealClock()
	then := time.Now().Add(-reanchorEvery - time.Millisecond)
	old := &anchor{t: then, unix: then.UnixNano()}
	c.anchor.Store(old)
	before := time.Now()
	got := c.nanos()
	if a := c.anchor.Load(); a == old || a.t.Before(before) || a.unix != a.t.UnixNano() {
		t.Fatalf("anchor %+v kept, want one read at or after %v", a, before)
	}
	if got < before.UnixNano() {
		t.Fatalf("nanos() = %d, before %v", got, before)
	}
}
