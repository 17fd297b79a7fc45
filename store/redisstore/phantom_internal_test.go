package redisstore

import (
	"testing"
	"time"
)

// TestClockOffset_KeepsAnUpperBound: the bound is the tightest seen; a
// looser reply replaces it only when it proves it too small (a stepped
// clock) or once it is old.
func TestClockOffset_KeepsAnUpperBound(t *testing.T) {
	at := func(us int64) time.Time { return time.UnixMicro(us) }
	var c clockOffset
	for i, step := range []struct {
		server, sent, arrived int64 // µs
		want                  int64
	}{
		{server: 5_000, sent: 1_000, arrived: 1_300, want: 4_000},                     // first reply
		{server: 6_100, sent: 2_000, arrived: 2_200, want: 4_000},                     // looser, within the round trip
		{server: 6_950, sent: 3_000, arrived: 3_100, want: 3_950},                     // tighter
		{server: 9_500, sent: 4_000, arrived: 4_100, want: 5_500},                     // proves 3,950 too small
		{server: 9_600, sent: 4_050, arrived: 4_060, want: 5_550},                     // looser
		{server: 20_009_900, sent: 10_004_100, arrived: 10_004_200, want: 10_005_800}, // older than offsetMaxAge
	} {
		c.observe(step.server, at(step.sent), at(step.arrived))
		if got, ok := c.get(); !ok || got != step.want {
			t.Fatalf("step %d: offset %d (%v), want %d", i, got, ok, step.want)
		}
	}
}
