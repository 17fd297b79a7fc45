package gateway

import (
	"testing"
	"time"
)

// A body has 10 s, and one more for every 64 KiB it declares (unknown or
// over the cap: as much as the cap allows): a client trickling a small
// body holds its connection for seconds, not a minute.
func TestBodyTimeout_GrowsWithTheBody(t *testing.T) {
	const maxBody = 8 << 20
	for _, c := range []struct {
		length int
		want   time.Duration
	}{
		{0, 10 * time.Second},
		{200, 10*time.Second + 200*time.Second/(64<<10)},
		{64 << 10, 11 * time.Second},
		{maxBody, 138 * time.Second},
		{-1, 138 * time.Second},
		{maxBody * 4, 138 * time.Second},
	} {
		if got := bodyTimeout(c.length, maxBody); got != c.want {
			t.Errorf("bodyTimeout(%d) = %v, want %v", c.length, got, c.want)
		}
	}
}
