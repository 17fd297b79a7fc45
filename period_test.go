package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return loc
}

func TestPeriodBounds_Steps(t *testing.T) {
	utc := time.UTC
	london := mustZone(t, "Europe/London")
	newYork := mustZone(t, "America/New_York")
	tokyo := mustZone(t, "Asia/Tokyo")
	kolkata := mustZone(t, "Asia/Kolkata")
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	tests := []struct {
		name       string
		period     sluice.Period
		loc        *time.Location
		t          time.Time
		start, end time.Time
		length     time.Duration
	}{
		{"UTC day", sluice.PeriodDay, utc, at(utc, 2026, 3, 4, 10, 0), at(utc, 2026, 3, 4, 0, 0), at(utc, 2026, 3, 5, 0, 0), 24 * time.Hour},
		{"UTC day at midnight starts it", sluice.PeriodDay, utc, at(utc, 2026, 3, 5, 0, 0), at(utc, 2026, 3, 5, 0, 0), at(utc, 2026, 3, 6, 0, 0), 24 * time.Hour},
		{"UTC day's last nanosecond", sluice.PeriodDay, utc, at(utc, 2026, 3, 5, 0, 0).Add(-time.Nanosecond), at(utc, 2026, 3, 4, 0, 0), at(utc, 2026, 3, 5, 0, 0), 24 * time.Hour},
		{"nil location is UTC", sluice.PeriodDay, nil, at(utc, 2026, 3, 4, 10, 0), at(utc, 2026, 3, 4, 0, 0), at(utc, 2026, 3, 5, 0, 0), 24 * time.Hour},
		{"time given in another zone", sluice.PeriodDay, utc, at(newYork, 2026, 3, 4, 23, 30), at(utc, 2026, 3, 5, 0, 0), at(utc, 2026, 3, 6, 0, 0), 24 * time.Hour},
		{"New Year's Eve to New Year's Day", sluice.PeriodDay, utc, at(utc, 2026, 12, 31, 23, 59), at(utc, 2026, 12, 31, 0, 0), at(utc, 2027, 1, 1, 0, 0), 24 * time.Hour},
		{"leap day", sluice.PeriodDay, utc, at(utc, 2028, 2, 29, 12, 0), at(utc, 2028, 2, 29, 0, 0), at(utc, 2028, 3, 1, 0, 0), 24 * time.Hour},

		{"UTC week from a Wednesday", sluice.PeriodWeek, utc, at(utc, 2026, 3, 4, 10, 0), at(utc, 2026, 3, 2, 0, 0), at(utc, 2026, 3, 9, 0, 0), 7 * 24 * time.Hour},
		{"ISO week: Sunday is its last day", sluice.PeriodWeek, utc, at(utc, 2026, 3, 8, 23, 59), at(utc, 2026, 3, 2, 0, 0), at(utc, 2026, 3, 9, 0, 0), 7 * 24 * time.Hour},
		{"ISO week: Monday is its first", sluice.PeriodWeek, utc, at(utc, 2026, 3, 9, 0, 0), at(utc, 2026, 3, 9, 0, 0), at(utc, 2026, 3, 16, 0, 0), 7 * 24 * time.Hour},
		{"week across the new year", sluice.PeriodWeek, utc, at(utc, 2027, 1, 1, 8, 0), at(utc, 2026, 12, 28, 0, 0), at(utc, 2027, 1, 4, 0, 0), 7 * 24 * time.Hour},
		{"week across a month end", sluice.PeriodWeek, utc, at(utc, 2026, 3, 1, 12, 0), at(utc, 2026, 2, 23, 0, 0), at(utc, 2026, 3, 2, 0, 0), 7 * 24 * time.Hour},

		{"UTC month", sluice.PeriodMonth, utc, at(utc, 2026, 3, 4, 10, 0), at(utc, 2026, 3, 1, 0, 0), at(utc, 2026, 4, 1, 0, 0), 31 * 24 * time.Hour},
		{"leap February", sluice.PeriodMonth, utc, at(utc, 2028, 2, 29, 23, 0), at(utc, 2028, 2, 1, 0, 0), at(utc, 2028, 3, 1, 0, 0), 29 * 24 * time.Hour},
		{"common February", sluice.PeriodMonth, utc, at(utc, 2026, 2, 28, 23, 0), at(utc, 2026, 2, 1, 0, 0), at(utc, 2026, 3, 1, 0, 0), 28 * 24 * time.Hour},
		{"December to January", sluice.PeriodMonth, utc, at(utc, 2026, 12, 31, 23, 59), at(utc, 2026, 12, 1, 0, 0), at(utc, 2027, 1, 1, 0, 0), 31 * 24 * time.Hour},
		{"first instant of January", sluice.PeriodMonth, utc, at(utc, 2027, 1, 1, 0, 0), at(utc, 2027, 1, 1, 0, 0), at(utc, 2027, 2, 1, 0, 0), 31 * 24 * time.Hour},

		{"London spring day is 23 hours", sluice.PeriodDay, london, at(london, 2026, 3, 29, 12, 0), at(london, 2026, 3, 29, 0, 0), at(london, 2026, 3, 30, 0, 0), 23 * time.Hour},
		{"London autumn day is 25 hours", sluice.PeriodDay, london, at(london, 2026, 10, 25, 12, 0), at(london, 2026, 10, 25, 0, 0), at(london, 2026, 10, 26, 0, 0), 25 * time.Hour},
		{"London day seen in UTC", sluice.PeriodDay, london, at(utc, 2026, 6, 30, 23, 30), at(utc, 2026, 6, 30, 23, 0), at(utc, 2026, 7, 1, 23, 0), 24 * time.Hour},
		{"London week with the spring change", sluice.PeriodWeek, london, at(london, 2026, 3, 29, 12, 0), at(london, 2026, 3, 23, 0, 0), at(london, 2026, 3, 30, 0, 0), 7*24*time.Hour - time.Hour},
		{"New York spring day is 23 hours", sluice.PeriodDay, newYork, at(newYork, 2026, 3, 8, 0, 30), at(utc, 2026, 3, 8, 5, 0), at(utc, 2026, 3, 9, 4, 0), 23 * time.Hour},
		{"New York autumn day is 25 hours", sluice.PeriodDay, newYork, at(newYork, 2026, 11, 1, 23, 0), at(utc, 2026, 11, 1, 4, 0), at(utc, 2026, 11, 2, 5, 0), 25 * time.Hour},
		{"New York repeated hour belongs to its day", sluice.PeriodDay, newYork, at(utc, 2026, 11, 1, 6, 30), at(utc, 2026, 11, 1, 4, 0), at(utc, 2026, 11, 2, 5, 0), 25 * time.Hour},
		{"New York March", sluice.PeriodMonth, newYork, at(newYork, 2026, 3, 15, 0, 0), at(utc, 2026, 3, 1, 5, 0), at(utc, 2026, 4, 1, 4, 0), 31*24*time.Hour - time.Hour},
		{"New York December to January", sluice.PeriodMonth, newYork, at(utc, 2027, 1, 1, 3, 0), at(newYork, 2026, 12, 1, 0, 0), at(newYork, 2027, 1, 1, 0, 0), 31 * 24 * time.Hour},
		{"Tokyo day is ahead of UTC", sluice.PeriodDay, tokyo, at(utc, 2026, 3, 4, 20, 0), at(utc, 2026, 3, 4, 15, 0), at(utc, 2026, 3, 5, 15, 0), 24 * time.Hour},
		{"Kolkata half-hour offset", sluice.PeriodDay, kolkata, at(utc, 2026, 3, 4, 18, 29), at(utc, 2026, 3, 3, 18, 30), at(utc, 2026, 3, 4, 18, 30), 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, end := sluice.PeriodBounds(tt.period, tt.t, tt.loc)
			if !start.Equal(tt.start) || !end.Equal(tt.end) {
				t.Fatalf("PeriodBounds(%s, %v) = [%v, %v), want [%v, %v)", tt.period, tt.t, start, end, tt.start, tt.end)
			}
			if got := end.Sub(start); got != tt.length {
				t.Fatalf("period is %v long, want %v", got, tt.length)
			}
			if tt.t.Before(start) || !tt.t.Before(end) {
				t.Fatalf("%v is not in [%v, %v)", tt.t, start, end)
			}
			want := tt.loc
			if want == nil {
				want = time.UTC
			}
			if start.Location() != want || end.Location() != want {
				t.Fatalf("bounds in %v and %v, want %v", start.Location(), end.Location(), want)
			}
		})
	}
}

// Consecutive periods tile time: the end of one is the start of the next,
// through a whole year of days, weeks and months in zones with DST.
func TestPeriodBounds_Tile(t *testing.T) {
	for _, zone := range []string{"UTC", "Europe/London", "America/New_York", "Australia/Sydney"} {
		loc := mustZone(t, zone)
		for _, p := range []sluice.Period{sluice.PeriodDay, sluice.PeriodWeek, sluice.PeriodMonth} {
			_, end := sluice.PeriodBounds(p, time.Date(2025, 12, 31, 12, 0, 0, 0, loc), loc)
			for end.Year() < 2027 {
				start, next := sluice.PeriodBounds(p, end, loc)
				if !start.Equal(end) {
					t.Fatalf("%s %s: period after one ending %v starts %v", zone, p, end, start)
				}
				if h := next.Sub(start); h < 23*time.Hour || h > 31*24*time.Hour+time.Hour {
					t.Fatalf("%s %s: period from %v is %v long", zone, p, start, h)
				}
				if p == sluice.PeriodWeek && start.Weekday() != time.Monday {
					t.Fatalf("%s: week starts on %v", zone, start.Weekday())
				}
				end = next
			}
		}
	}
}
