package storetest

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// reservationLister is admin.ReservationLister: a store that lists its
// open reservations as every process sharing it sees them.
type reservationLister interface {
	Reservations(ctx context.Context, limit int) ([]sluice.Batch, error)
}

// reservationScenarios apply to stores that are a reservationLister; the
// others pass them trivially.
var reservationScenarios = map[string]func(t *testing.T, h *Harness){
	// Two limiters on one store stand for two replicas: each one's open
	// reservations are listed, the soonest deadline first, with what their
	// budget charges and leases hold (rate charges hold nothing), until
	// they are settled or swept; one past its deadline is listed until
	// the sweep.
	"ReservationsListedAcrossReplicas": func(t *testing.T, h *Harness) {
		rl, ok := h.Store.(reservationLister)
		if !ok {
			t.Logf("%T is not an admin.ReservationLister", h.Store)
			return
		}
		rules := []sluice.Rule{
			{Name: "ws_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
			// Global: on a Redis Cluster, a slot of its own, so each batch
			// has two records there, joined into one reservation.
			{Name: "all_tokens", Kind: sluice.KindBudget, Subject: "global", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
			{Name: "user_busy", Kind: sluice.KindConcurrency, Subject: "user", Limit: 5},
			{Name: "user_rate", Kind: sluice.KindRate, Subject: "user", Metric: sluice.MetricTokens, Limit: 1000, Window: time.Minute},
		}
		a, b := h.Limiter(rules...), h.Limiter(rules...)
		first := h.Admit(a, sluice.Request{Identity: sluice.Identity{Org: "acme", Workspace: "w1", User: "ann"},
			Max: sluice.Usage{InputTokens: 10, OutputTokens: 20}, Timeout: time.Minute})
		second := h.Admit(b, sluice.Request{Identity: sluice.Identity{Org: "beta", Workspace: "w2", User: "bob"},
			Max: sluice.Usage{InputTokens: 40, OutputTokens: 60}, Timeout: 2 * time.Minute})
		tokens := map[*sluice.Reservation]int64{first: 30, second: 100}
		list := func(limit int, want ...*sluice.Reservation) {
			t.Helper()
			got, err := rl.Reservations(h.Ctx, limit)
			if err != nil {
				t.Fatalf("reservations: %v", err)
			}
			if len(got) != len(want) {
				t.Fatalf("reservations(%d) = %+v, want %d", limit, got, len(want))
			}
			for i, r := range want {
				g := got[i]
				if g.ID != r.ID() || !g.Deadline.Equal(r.Deadline()) {
					t.Fatalf("reservation %d = %d due %v, want %d due %v", i, g.ID, g.Deadline, r.ID(), r.Deadline())
				}
				// Two budgets of the call's tokens and one lease, on the
				// counters the Limiter charged.
				var charges []sluice.Charge
				for _, c := range r.Charges() {
					switch c.Kind {
					case sluice.KindBudget:
						charges = append(charges, sluice.Charge{Key: c.Key, Kind: c.Kind, Amount: tokens[r]})
					case sluice.KindConcurrency:
						charges = append(charges, sluice.Charge{Key: c.Key, Kind: c.Kind, Amount: 1})
					}
				}
				sortCharges(charges)
				have := slices.Clone(g.Charges)
				sortCharges(have)
				if len(charges) != 3 || !slices.Equal(have, charges) {
					t.Fatalf("reservation %d charges = %+v, want %+v", r.ID(), have, charges)
				}
			}
		}
		list(10, first, second)
		list(1, first)
		list(0)
		list(-1)
		h.Settle(first, sluice.Usage{InputTokens: 10, OutputTokens: 5})
		list(10, second)
		h.Clock.Advance(3 * time.Minute)
		list(10, second)
		if res, err := a.Sweep(h.Ctx); err != nil || res.Reservations != 1 {
			t.Fatalf("sweep = %+v, %v; want the second reservation swept", res, err)
		}
		list(10)
	},
}

func sortCharges(cs []sluice.Charge) {
	slices.SortFunc(cs, func(a, b sluice.Charge) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key.Rule, b.Key.Rule),
			cmp.Compare(a.Key.Subject, b.Key.Subject), cmp.Compare(a.Key.Period, b.Key.Period))
	})
}
