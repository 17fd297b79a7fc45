package clocktest_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clocktest"
)

func TestClock_WaitsMoveTimeAndFireTimers(t *testing.T) {
	start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	c := clocktest.New(start)
	var fired, stopped bool
	c.AfterFunc(2*time.Second, func() { fired = true })
	stop := c.AfterFunc(time.Second, func() { stopped = true })
	if !stop() || stop() {
		t.Fatal("stop reports true once, before the timer ran")
	}
	if got := <-c.After(1500 * time.Millisecond); !got.Equal(start.Add(1500 * time.Millisecond)) {
		t.Fatalf("After's time %v", got)
	}
	if fired {
		t.Fatal("a 2 s timer fired at 1.5 s")
	}
	c.Advance(500 * time.Millisecond)
	if !fired || stopped {
		t.Fatalf("fired %v (want true), stopped timer ran %v", fired, stopped)
	}
	if w := c.Waits(); len(w) != 1 || w[0] != 1500*time.Millisecond {
		t.Fatalf("waits %v", w)
	}
}
