package sluice

import (
	"testing"
	"time"
)

func TestCeilMillisecond(t *testing.T) {
	tests := []struct {
		in, want time.Duration
	}{
		{0, 0},
		{1, time.Millisecond},
		{time.Millisecond - 1, time.Millisecond},
		{time.Millisecond, time.Millisecond},
		{time.Millisecond + 1, 2 * time.Millisecond},
		{time.Second / 3, 334 * time.Millisecond},
		{333 * time.Millisecond, 333 * time.Millisecond},
		{time.Hour + 1, time.Hour + time.Millisecond},
	}
	for _, tt := range tests {
		if got := ceilMillisecond(tt.in); got != tt.want {
			t.Errorf("ceilMillisecond(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestScale(t *testing.T) {
	tests := []struct {
		v, pct, want int64
	}{
		{10, 50, 5},
		{10, 100, 10},
		{10, 250, 25},
		{10, 1, 1}, // never scaled to nothing
		{0, 50, 0},
		{199, 50, 99},
		{1 << 62, 50, 1 << 61}, // no overflow
		{1<<63 - 1, 100, 1<<63 - 1},
	}
	for _, tt := range tests {
		if got := scale(tt.v, tt.pct); got != tt.want {
			t.Errorf("scale(%d, %d%%) = %d, want %d", tt.v, tt.pct, got, tt.want)
		}
	}
}
