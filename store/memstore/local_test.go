package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// stores returns the two ways a Limiter reaches a Store: in place, and
// through Batches.
func stores() map[string]func() (sluice.Store, *memstore.Store) {
	return map[string]func() (sluice.Store, *memstore.Store){
		"local":   func() (sluice.Store, *memstore.Store) { s := memstore.New(memstore.Options{}); return s, s },
		"batches": func() (sluice.Store, *memstore.Store) { s := memstore.New(memstore.Options{}); return batchOnly{s}, s },
	}
}

// A settlement racing the sweep of the same reservation charges it once:
// whichever comes first settles it, the other does nothing.
func TestStore_SettleRacingSweepChargesOnce(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			store, _ := newStore()
			clock := storetest.NewClock(storetest.Start)
			budget := sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens,
				Limit: 1 << 40, Period: sluice.PeriodDay}
			l, err := sluice.New(sluice.Options{Store: store, Clock: clock, ServerID: "test", Rules: []sluice.Rule{budget},
				DefaultTimeout: time.Second, ExpirySlack: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const n = 200
			var res []*sluice.Reservation
			for range n {
				r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: "k"}, Max: sluice.Usage{InputTokens: 10}})
				if err != nil {
					t.Fatal(err)
				}
				res = append(res, r)
			}
			clock.Advance(time.Hour) // every reservation is past its deadline
			var wg sync.WaitGroup
			wg.Go(func() {
				if _, err := l.Sweep(ctx); err != nil {
					t.Error(err)
				}
			})
			for _, r := range res {
				wg.Go(func() {
					// Settled at 3 tokens; the sweep charges the 10 reserved.
					if err := r.Settle(ctx, sluice.Usage{InputTokens: 3}); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			eff, err := l.Effective(ctx, sluice.Identity{Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			used := eff[0].Used
			// Each reservation is charged 3 or 10, never both, never none.
			if used < 3*n || used > 10*n || (used-3*n)%7 != 0 {
				t.Fatalf("used %d after %d reservations settled at 3 or swept at 10", used, n)
			}
		})
	}
}

// An admission of more charges than a call plans on the stack, with
// subjects that first appear late and repeat, keeps each subject's
// counters together.
func TestStore_ManyChargesOnRepeatedSubjects(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			store, mem := newStore()
			clock := storetest.NewClock(storetest.Start)
			var rules []sluice.Rule
			for i := range 2 {
				rules = append(rules, sluice.Rule{Name: fmt.Sprintf("tag%d", i), Kind: sluice.KindRate, Subject: "tag", Limit: 2, Window: time.Hour})
			}
			l, err := sluice.New(sluice.Options{Store: store, Clock: clock, ServerID: "test", Rules: rules})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var tags []string
			for i := range 10 {
				tags = append(tags, fmt.Sprintf("t%d", i))
			}
			req := sluice.Request{Identity: sluice.Identity{Key: "k", Tags: tags}}
			// 20 charges: 2 rules on each of 10 tags, the tags of the first
			// rule in order, so that t8 and t9 first appear past the
			// charges planned on the stack.
			for range 2 {
				if _, err := l.Admit(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Admit(ctx, req); !errors.Is(err, sluice.ErrRateLimited) {
				t.Fatalf("third admission: %v, want rate limited", err)
			}
			if got := mem.Len(); got != 20 {
				t.Fatalf("%d counters, want 20", got)
			}
		})
	}
}
