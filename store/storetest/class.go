package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// classIn is a request of class in workspace ws.
func classIn(class, ws string) sluice.Request {
	return sluice.Request{Identity: sluice.Identity{Key: "k-" + ws, Workspace: ws, Class: class}}
}

// borrowedFrom returns the class whose share admitted r ("" for its own).
func borrowedFrom(t *testing.T, r *sluice.Reservation) string {
	t.Helper()
	cs := r.Result().Classes
	if len(cs) != 1 {
		t.Fatalf("result names %d class rules, want 1", len(cs))
	}
	return cs[0].BorrowedFrom
}

var classScenarios = map[string]func(t *testing.T, h *Harness){
	// A class rule's demand marker is a budget of one charged nothing: it
	// admits while the counter holds nothing, and refuses once a settled
	// charge of one is in it, until its period ends.
	"ClassDemandMarkerIsABudgetOfOne": func(t *testing.T, h *Harness) {
		now := h.Clock.Now()
		start := now.Unix()
		marker := func(id uint64, period int64, limit, amount int64) *sluice.Batch {
			return &sluice.Batch{ID: id, Deadline: now.Add(time.Minute), Charges: []sluice.Charge{{
				Key:  sluice.CounterKey{Rule: 0xc1a55, Subject: "", Period: period},
				Kind: sluice.KindBudget, Limit: limit, Amount: amount, Actual: amount,
				PeriodEnd: time.Unix(period, 0).Add(5 * time.Second)}}}
		}
		admit := func(b *sluice.Batch) bool {
			t.Helper()
			results := make([]sluice.ChargeResult, len(b.Charges))
			ok, err := h.Store.Admit(h.Ctx, now, *b, results)
			if err != nil {
				t.Fatalf("admit: %v", err)
			}
			if ok != results[0].Allowed {
				t.Fatalf("admit said %v, its charge %v", ok, results[0].Allowed)
			}
			if ok {
				if err := h.Store.Settle(h.Ctx, now, *b); err != nil {
					t.Fatalf("settle: %v", err)
				}
			}
			return ok
		}
		if !admit(marker(1, start, 1, 0)) {
			t.Fatal("a check of an empty marker was refused")
		}
		if !admit(marker(2, start, 1<<20, 1)) {
			t.Fatal("setting the marker was refused")
		}
		if admit(marker(3, start, 1, 0)) {
			t.Fatal("a check of a set marker was admitted")
		}
		if !admit(marker(4, start+5, 1, 0)) {
			t.Fatal("the next period's marker was set too")
		}
	},
	// A class alone borrows the idle share of another; once the owner asks,
	// the share goes back to it as the borrowed calls end.
	"ClassShareLentUntilOwnerAsks": func(t *testing.T, h *Harness) {
		l := h.Limiter(sluice.Rule{Name: "calls", Kind: sluice.KindConcurrency, Subject: "global", Limit: 3,
			Classes: []sluice.Class{{Name: "interactive", Floor: 2}, {Name: "batch", Floor: 1}}})
		var lent []*sluice.Reservation
		for range 3 {
			if r := h.Admit(l, classIn("batch", "b")); borrowedFrom(t, r) == "interactive" {
				lent = append(lent, r)
			}
		}
		if len(lent) != 2 {
			t.Fatalf("batch borrowed %d of interactive's 2", len(lent))
		}
		h.Refuse(l, classIn("interactive", "i"), sluice.ErrBusy)
		h.Settle(lent[0], sluice.Usage{})
		h.Refuse(l, classIn("batch", "b"), sluice.ErrBusy)
		if from := borrowedFrom(t, h.Admit(l, classIn("interactive", "i"))); from != "" {
			t.Fatalf("interactive admitted from %q's share, want its own", from)
		}
	},
	"ClassRateRefillGoesToOwner": func(t *testing.T, h *Harness) {
		l := h.Limiter(sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "global", Limit: 60, Window: time.Minute,
			Classes: []sluice.Class{{Name: "interactive", Floor: 30}, {Name: "batch", Floor: 30}}})
		count := func(class string) int {
			n := 0
			for ; n < 100; n++ {
				if _, err := l.Admit(h.Ctx, classIn(class, class)); err != nil {
					return n
				}
			}
			return n
		}
		if n := count("batch"); n != 60 {
			t.Fatalf("a lone class was admitted %d times, want 60", n)
		}
		h.Refuse(l, classIn("interactive", "i"), sluice.ErrRateLimited)
		h.Clock.Advance(10 * time.Second)
		if n := count("batch"); n != 5 {
			t.Fatalf("batch admitted %d times after 10s, want its own 5", n)
		}
		if n := count("interactive"); n != 5 {
			t.Fatalf("interactive admitted %d times after 10s, want its 5", n)
		}
	},
}
