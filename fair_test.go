package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// The case: under a global cap of one call in flight, tenant a
// queues four batch calls and tenant b one, a moment later; b's call is
// served second, not behind all of a's.
func TestLimiter_WaitersServedFairlyAcrossTenants(t *testing.T) {
	servedFairly(t, sluice.Rule{Name: "global", Kind: sluice.KindConcurrency, Subject: "global", Limit: 1}, nil, nil)
}

// servedFairly runs the case on rule, each request edited by edit,
// after setup has taken what the case does not use of the rule's capacity
// (either may be nil): the rule must be full once one call is admitted.
func servedFairly(t *testing.T, rule sluice.Rule, edit func(*sluice.Request), setup func(*sluice.Limiter)) {
	t.Helper()
	l, clock := withRules(t, rule)
	if setup != nil {
		setup(l)
	}
	in := func(ws, k string) sluice.Request {
		r := waiting(k, time.Hour)
		r.Identity.Workspace = ws
		if edit != nil {
			edit(&r)
		}
		return r
	}
	holder := admit(t, l, in("a", "ka"))
	type call struct {
		name string
		done <-chan outcome
	}
	var calls []call
	queue := func(name, ws string) {
		calls = append(calls, call{name, admitAsync(context.Background(), l, in(ws, "k"+ws))})
		// The head holds two timers (MaxWait and its pause), every other
		// waiter one.
		waitTimers(t, clock, len(calls)+1)
	}
	for _, name := range []string{"a1", "a2", "a3", "a4"} {
		queue(name, "a")
	}
	queue("b1", "b")

	var order []string
	running := holder
	spent := 0
	for len(calls) > 0 {
		settle(t, running, sluice.Usage{})
		var got int = -1
		deadline := time.Now().Add(5 * time.Second)
		for got < 0 {
			for i, c := range calls {
				select {
				case o := <-c.done:
					if o.err != nil {
						t.Fatalf("%s: %v", c.name, o.err)
					}
					got, running = i, o.r
				default:
				}
				if got >= 0 {
					break
				}
			}
			if got < 0 && time.Now().After(deadline) {
				t.Fatal("no waiter admitted after a settlement")
			}
		}
		order = append(order, calls[got].name)
		calls = append(calls[:got], calls[got+1:]...)
		// The admitted waiter's two timers stay on the virtual clock.
		spent += 2
		if len(calls) > 0 {
			waitTimers(t, clock, spent+len(calls)+1)
		}
		for _, c := range calls {
			pending(t, c.done, c.name+" while the cap is held")
		}
	}
	want := []string{"a1", "b1", "a2", "a3", "a4"}
	if len(order) != len(want) {
		t.Fatalf("order %v", order)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("served %v, want %v", order, want)
		}
	}
	settle(t, running, sluice.Usage{})
}
