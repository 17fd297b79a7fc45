// Package human writes durations and instants as messages to people say
// them: "1 minute", "334 milliseconds", "per hour", never Go's "1m0s".
package human

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration writes d in words, rounded up to the millisecond (a wait is
// never said shorter than it is): "334 milliseconds", "1.5 seconds",
// "1 minute", "2 minutes 5 seconds", "1 hour 30 minutes". A part below a
// whole second is kept only under a minute, rounded up to the second
// above.
func Duration(d time.Duration) string {
	if d < 0 {
		return "-" + Duration(-d)
	}
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	switch {
	case d < time.Second:
		return Plural(int64(d/time.Millisecond), "millisecond")
	case d < time.Minute:
		s := strconv.FormatFloat(float64(d)/float64(time.Second), 'f', -1, 64)
		if s == "1" {
			return "1 second"
		}
		return s + " seconds"
	}
	// Whole seconds, rounded up: never say less than the wait.
	secs := int64((d + time.Second - 1) / time.Second)
	parts := []string{}
	for _, u := range []struct {
		name string
		secs int64
	}{{"day", 86400}, {"hour", 3600}, {"minute", 60}, {"second", 1}} {
		if n := secs / u.secs; n > 0 {
			parts = append(parts, Plural(n, u.name))
			secs -= n * u.secs
		}
	}
	return strings.Join(parts, " ")
}

// Per writes what a rate's window is per: "second", "minute", "hour",
// "day" for one of each, else the duration ("90 seconds", "5 minutes").
func Per(window time.Duration) string {
	switch window {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	}
	return Duration(window)
}

// Instant writes t as a retry instant: in UTC, RFC 3339, rounded up to
// the second so that it is never before the moment it names.
func Instant(t time.Time) string {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		t = r.Add(time.Second)
	}
	return t.UTC().Format(time.RFC3339)
}

// Plural writes n and unit, unit with an s unless n is 1.
func Plural(n int64, unit string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", unit)
	}
	return fmt.Sprintf("%d %ss", n, unit)
}
