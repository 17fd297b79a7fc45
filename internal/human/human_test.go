package human

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{334 * time.Millisecond, "334 milliseconds"},
		{time.Millisecond, "1 millisecond"},
		{1500 * time.Microsecond, "2 milliseconds"},
		{time.Second, "1 second"},
		{1500 * time.Millisecond, "1.5 seconds"},
		{59*time.Second + 999*time.Millisecond, "59.999 seconds"},
		{time.Minute, "1 minute"},
		{time.Minute + 500*time.Millisecond, "1 minute 1 second"},
		{125 * time.Second, "2 minutes 5 seconds"},
		{90 * time.Minute, "1 hour 30 minutes"},
		{49 * time.Hour, "2 days 1 hour"},
	} {
		if got := Duration(c.d); got != c.want {
			t.Errorf("Duration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestPer(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "second"}, {time.Minute, "minute"}, {time.Hour, "hour"}, {24 * time.Hour, "day"},
		{90 * time.Second, "1 minute 30 seconds"}, {5 * time.Minute, "5 minutes"},
	} {
		if got := Per(c.d); got != c.want {
			t.Errorf("Per(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestInstant_RoundsUp(t *testing.T) {
	at := time.Date(2026, 3, 5, 0, 0, 3, 1, time.FixedZone("x", 3600))
	if got := Instant(at); got != "2026-03-04T23:00:04Z" {
		t.Errorf("Instant = %q", got)
	}
	if got := Instant(at.Truncate(time.Second)); got != "2026-03-04T23:00:03Z" {
		t.Errorf("Instant of a whole second = %q", got)
	}
}
