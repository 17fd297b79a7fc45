package sluice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// leaseRules are a budget and one place per key.
var leaseRules = []sluice.Rule{daily(sluice.MetricTokens, 1_000_000), inFlight(1)}

// TestLimiter_LeaseRenewedWhileHeldSweptWhenHolderVanished: two Limiters
// share a store, as two replicas do. The one alive runs RunSweeper, which
// renews its reservation every LeaseTimeout/3 on the Limiter's clock; the
// other died holding one. At the lease's end the dead one's place and
// budget reservation are swept, while the live one's call, longer than the
// lease, keeps its place and is settled at its usage.
func TestLimiter_LeaseRenewedWhileHeldSweptWhenHolderVanished(t *testing.T) {
	store := memstore.New(memstore.Options{})
	opts := sluice.Options{Store: store, Rules: leaseRules, DefaultTimeout: 10 * time.Minute, LeaseTimeout: 3 * time.Minute}
	alive, clock := newLimiter(t, opts)
	opts.Clock = clock
	dead, _ := newLimiter(t, opts)
	mine := admit(t, alive, tokens("a", 10, 90))
	gone := admit(t, dead, tokens("b", 10, 90))
	if want := start.Add(3 * time.Minute); !mine.Deadline().Equal(want) || !gone.Deadline().Equal(want) {
		t.Fatalf("deadlines %v and %v, want the lease's end %v", mine.Deadline(), gone.Deadline(), want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { alive.RunSweeper(ctx, time.Hour, func(err error) { t.Errorf("sweeper: %v", err) }) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	for minute := 1; minute <= 3; minute++ {
		waitTimers(t, clock, 1) // the renewer waits for its next turn
		clock.Advance(time.Minute)
	}
	waitTimers(t, clock, 1) // the renewal at 3m is done
	if want := start.Add(6 * time.Minute); !mine.Deadline().Equal(want) {
		t.Fatalf("held reservation due %v, want renewed to %v", mine.Deadline(), want)
	}
	if res, err := alive.Sweep(context.Background()); err != nil || res.Reservations != 1 {
		t.Fatalf("sweep at the lease's end = %+v, %v; want the dead replica's reservation", res, err)
	}
	refuse(t, alive, byKey("a"), sluice.ErrBusy)
	admit(t, alive, byKey("b"))
	settle(t, mine, sluice.Usage{InputTokens: 10, OutputTokens: 20})
	if used := effective(t, alive, ident("a"), "daily").Used; used != 130 {
		t.Fatalf("daily used %d, want 100 charged by the sweep and 30 settled", used)
	}
}

// renewCounter is a memstore that counts the batches it is asked to renew.
type renewCounter struct {
	*memstore.Store
	mu      sync.Mutex
	batches []uint64
	calls   int
}

func (s *renewCounter) RenewLeases(ctx context.Context, now time.Time, renewals []sluice.Batch) error {
	s.mu.Lock()
	s.calls++
	for _, r := range renewals {
		s.batches = append(s.batches, r.ID)
	}
	s.mu.Unlock()
	return s.Store.RenewLeases(ctx, now, renewals)
}

// TestLimiter_RenewsOnlyWhatItHolds: a Limiter renews the reservations
// that hold a place or a budget reservation, until they are settled or
// released, or their model deadline passes (then the sweep settles them,
// and a reservation nobody settles is not held forever).
func TestLimiter_RenewsOnlyWhatItHolds(t *testing.T) {
	store := &renewCounter{Store: memstore.New(memstore.Options{})}
	rules := []sluice.Rule{rpm(100), {Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 10, Match: sluice.Match{Models: []string{"m"}}}}
	l, clock := newLimiter(t, sluice.Options{Store: store, Rules: rules, LeaseTimeout: 30 * time.Second})
	withModel := func(k string) sluice.Request {
		r := byKey(k)
		r.Identity.Model = "m"
		return r
	}
	settled := admit(t, l, withModel("a"))
	released := admit(t, l, withModel("b"))
	kept := admit(t, l, withModel("c"))
	admit(t, l, byKey("d")) // a rate charge only: nothing to renew
	settle(t, settled, sluice.Usage{})
	if err := released.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	renewed := func(want ...uint64) {
		t.Helper()
		clock.Advance(10 * time.Second)
		store.mu.Lock()
		store.batches = nil
		store.mu.Unlock()
		if err := l.RenewLeases(context.Background()); err != nil {
			t.Fatal(err)
		}
		store.mu.Lock()
		defer store.mu.Unlock()
		if len(store.batches) != len(want) || len(want) == 1 && store.batches[0] != want[0] {
			t.Fatalf("renewed %v, want %v", store.batches, want)
		}
	}
	renewed(kept.ID())
	if want := clock.Now().Add(30 * time.Second); !kept.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", kept.Deadline(), want)
	}
	// The model deadline (1m) plus slack (30s) is the last renewal's end.
	clock.Set(start.Add(70 * time.Second))
	renewed(kept.ID())
	if want := start.Add(90 * time.Second); !kept.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want the model deadline plus slack %v", kept.Deadline(), want)
	}
	renewed()
}

// TestLimiter_RenewsInChunks: a Limiter with many calls in flight renews
// them all, a few hundred per store call, so that each call fits in the
// store's timeout.
func TestLimiter_RenewsInChunks(t *testing.T) {
	store := &renewCounter{Store: memstore.New(memstore.Options{})}
	l, clock := newLimiter(t, sluice.Options{Store: store, Rules: []sluice.Rule{inFlight(1000)}, LeaseTimeout: 30 * time.Second})
	var held []*sluice.Reservation
	for range 600 {
		held = append(held, admit(t, l, byKey("a")))
	}
	clock.Advance(10 * time.Second)
	if err := l.RenewLeases(context.Background()); err != nil {
		t.Fatal(err)
	}
	if store.calls != 3 || len(store.batches) != 600 {
		t.Fatalf("%d store calls renewed %d reservations, want 3 calls for 600", store.calls, len(store.batches))
	}
	for _, r := range held {
		if want := start.Add(40 * time.Second); !r.Deadline().Equal(want) {
			t.Fatalf("deadline %v, want %v", r.Deadline(), want)
		}
	}
}

// hidden is a store that cannot renew.
type hidden struct{ sluice.Store }

// TestLimiter_LeaseTimeoutNeedsARenewingStore: over a store that is not a
// LeaseRenewer, LeaseTimeout changes nothing: a reservation is due at its
// model deadline plus slack, as before, and RenewLeases does nothing.
func TestLimiter_LeaseTimeoutNeedsARenewingStore(t *testing.T) {
	l, _ := newLimiter(t, sluice.Options{Store: hidden{memstore.New(memstore.Options{})}, Rules: leaseRules, LeaseTimeout: 10 * time.Second})
	r := admit(t, l, tokens("a", 1, 1))
	if want := start.Add(90 * time.Second); !r.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", r.Deadline(), want)
	}
	if err := l.RenewLeases(context.Background()); err != nil {
		t.Fatal(err)
	}
}
