package main

import (
	"math/rand/v2"
	"testing"
)

// The snapshot design never overshoots by more than (Regions-1) x peak
// rate x Delay, and the bound is tight: the search finds loads within a
// few percent of it.
func TestSnapshot_OvershootWithinTheBoundAndTheBoundIsTight(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	worst := 0.0
	for i := range 4000 {
		s := RandomScenario(rng, Snapshot)
		r := Run(s)
		if r.Overshoot > r.Bound {
			t.Fatalf("run %d (%d regions, delay %d, budget %d): overshoot %d over the bound %d", i, s.Regions, s.Delay, s.Budget, r.Overshoot, r.Bound)
		}
		if r.Spent > s.Budget+r.Bound {
			t.Fatalf("run %d: spent %d", i, r.Spent)
		}
		worst = max(worst, float64(r.Overshoot)/float64(r.Bound))
	}
	if worst < 0.9 {
		t.Fatalf("the worst load found reached %.0f %% of the bound: the bound is not tight, or the search is too weak", 100*worst)
	}
	t.Logf("worst overshoot found: %.1f %% of the bound", 100*worst)
}

// Acknowledged allocations never overshoot, partitions included.
func TestAcknowledged_NeverOvershoots(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 4000 {
		s := RandomScenario(rng, Acknowledged)
		if r := Run(s); r.Overshoot != 0 {
			t.Fatalf("run %d (%d regions, delay %d, budget %d, cut %v): overshoot %d", i, s.Regions, s.Delay, s.Budget, s.Cut != nil, r.Overshoot)
		}
	}
}

// The scripted loads: a region cut off spends no more than it was given,
// and a budget under steady demand is spent whole.
func TestScenarios(t *testing.T) {
	for _, s := range Scenarios(3, 1000, 200) {
		r := Run(s)
		if r.Overshoot > r.Bound || (s.Mode == Acknowledged && r.Overshoot != 0) {
			t.Errorf("%s %s: overshoot %d, bound %d", s.Name, s.Mode, r.Overshoot, r.Bound)
		}
		// Shares are rounded down: a few tokens may be left.
		if s.Name == "steady" && r.Spent < s.Budget-int64(s.Regions) {
			t.Errorf("%s %s: spent %d of %d under a demand above it", s.Name, s.Mode, r.Spent, s.Budget)
		}
	}
}
