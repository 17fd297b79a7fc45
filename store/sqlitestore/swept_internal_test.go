package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/storetest"
)

// A settlement the sweep overtook returns only once the journal has
// written everything queued before it, the admission among them: the
// engine reuses an admission's memory once its Settle returns, and the
// journal reads admissions in place. Here the journal holds the admission
// for 300 ms, as a stalled writer would, while the sweep takes it.
func TestStore_SettleOvertakenBySweepWaitsForTheJournal(t *testing.T) {
	for _, async := range []bool{false, true} {
		ctx := context.Background()
		clock := storetest.NewClock(storetest.Start)
		s, err := Open(Options{Path: filepath.Join(t.TempDir(), "store.db"), Clock: clock,
			GroupDelay: 300 * time.Millisecond, HoldSettlements: true})
		if err != nil {
			t.Fatal(err)
		}
		l, err := sluice.New(sluice.Options{Store: s, Clock: clock, ServerID: "test", DefaultTimeout: time.Minute,
			ExpirySlack: time.Second, Rules: []sluice.Rule{{Name: "daily", Kind: sluice.KindBudget, Subject: "key",
				Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodDay}}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: "k"}, Max: sluice.Usage{InputTokens: 10}})
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Minute)
		// The sweep's first half: it takes the admission from the
		// counters, and has not yet queued (nor waited for) its own
		// journal entry.
		if _, res := s.mem.SweepExpired(clock.Now()); res.Reservations != 1 {
			t.Fatalf("sweep took %+v", res)
		}
		if async {
			done := make(chan error, 1)
			r.SettleAsync(ctx, sluice.Usage{InputTokens: 10}, func(err error) { done <- err })
			err = <-done
		} else {
			err = r.Settle(ctx, sluice.Usage{InputTokens: 10})
		}
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		pending, committed, queued := len(s.pending), s.done, s.queued
		s.mu.Unlock()
		if pending != 0 || committed < queued {
			t.Fatalf("async %v: the settlement returned with %d ops pending (%d of %d committed): the journal may still read the admission",
				async, pending, committed, queued)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
