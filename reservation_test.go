package sluice_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
)

// A Reservation is the caller's: what the admission found stays readable
// after Settle, and Charges then says what each charge was settled at.
func TestReservation_ResultAndChargesAfterSettle(t *testing.T) {
	l, _ := withRules(t, inFlight(2), daily(sluice.MetricTokens, 1000))
	req := tokens("k", 100, 200)
	req.Identity.Workspace = "w"
	r := admit(t, l, req)
	before, charges := r.Result(), r.Charges()
	if before.Rule != "inflight" || before.Remaining != 1 || len(charges) != 2 {
		t.Fatalf("before settling: %+v, %d charges", before, len(charges))
	}
	settle(t, r, sluice.Usage{InputTokens: 100, OutputTokens: 50})
	after := r.Result()
	if after.Rule != before.Rule || after.Remaining != before.Remaining || !after.ResetAt.Equal(before.ResetAt) {
		t.Fatalf("Result after Settle = %+v, want %+v", after, before)
	}
	got := r.Charges()
	if len(got) != 2 {
		t.Fatalf("Charges after Settle: %d, want 2", len(got))
	}
	for i, c := range got {
		if c.Key != charges[i].Key || c.Amount != charges[i].Amount || charges[i].Actual != 0 {
			t.Errorf("charge %d after Settle %+v, before %+v", i, c, charges[i])
		}
		want := int64(1)
		if c.Kind == sluice.KindBudget {
			want = 150
		}
		if c.Actual != want {
			t.Errorf("charge %d (%s) settled at %d, want %d", i, c.Kind, c.Actual, want)
		}
	}
	if r.ID() == 0 || r.Deadline().IsZero() {
		t.Fatalf("ID %d, Deadline %v after Settle", r.ID(), r.Deadline())
	}
}

// Settle called from several goroutines at once charges once (run with
// -race), and Result and Charges may be read meanwhile.
func TestReservation_ConcurrentSettleChargesOnce(t *testing.T) {
	l, _ := withRules(t, daily(sluice.MetricTokens, 1<<40), inFlight(1))
	id := sluice.Identity{Key: "k", Workspace: "w"}
	const rounds = 100
	for range rounds {
		r := admit(t, l, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 10, OutputTokens: 10}})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if err := r.Settle(context.Background(), sluice.Usage{InputTokens: 7}); err != nil {
					t.Error(err)
				}
				if res := r.Result(); res.Rule == "" || len(r.Charges()) != 2 {
					t.Errorf("read %+v while settling", res)
				}
			})
		}
		wg.Wait()
	}
	if used := effective(t, l, id, "daily").Used; used != 7*rounds {
		t.Fatalf("budget used %d, want %d: a reservation was charged more than once", used, 7*rounds)
	}
}
