package sluice_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A settled reservation's state serves the next admission. The tests below
// hold a settled reservation whose state was handed on, and check that it
// can neither read nor settle the admission that now holds the state.

// admitReusing settles a reservation and admits again until the second
// admission is given the first one's state (the pool may hand out another,
// and under the race detector drops some states on purpose).
func admitReusing(t *testing.T, l *sluice.Limiter, req sluice.Request) (old, cur *sluice.Reservation) {
	t.Helper()
	for range 1000 {
		old = admit(t, l, req)
		settle(t, old, sluice.Usage{})
		cur = admit(t, l, req)
		if sluice.SameState(old, cur) {
			return old, cur
		}
		settle(t, cur, sluice.Usage{})
	}
	t.Fatal("no admission reused a settled reservation's state in 1000 tries")
	return nil, nil
}

func TestReservation_SettledHandleLeavesTheNextAdmissionAlone(t *testing.T) {
	ctx := context.Background()
	for _, release := range []bool{false, true} {
		l, _ := withRules(t, inFlight(1))
		old, cur := admitReusing(t, l, byKey("k"))
		id, deadline := old.ID(), old.Deadline()
		if id == cur.ID() {
			t.Fatalf("two admissions with id %d", id)
		}
		// The old handle neither settles nor releases the new admission:
		// its lease still holds the only place.
		var err error
		if release {
			err = old.Release(ctx)
		} else {
			err = old.Settle(ctx, sluice.Usage{})
		}
		if err != nil {
			t.Fatalf("second settlement: %v", err)
		}
		done := make(chan error, 1)
		old.SettleAsync(ctx, sluice.Usage{}, func(err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatalf("second SettleAsync: %v", err)
		}
		refuse(t, l, byKey("k"), sluice.ErrBusy)
		// Nor does it read it; its id and deadline are its own.
		if res := old.Result(); res.Rule != "" || res.Limit != 0 {
			t.Fatalf("settled reservation reads %+v", res)
		}
		if c := old.Charges(); c != nil {
			t.Fatalf("settled reservation reads charges %+v", c)
		}
		if old.ID() != id || !old.Deadline().Equal(deadline) {
			t.Fatalf("settled reservation's id or deadline changed")
		}
		if res := cur.Result(); res.Rule != "inflight" || res.Remaining != 0 {
			t.Fatalf("current reservation reads %+v", res)
		}
		settle(t, cur, sluice.Usage{})
		settle(t, admit(t, l, byKey("k")), sluice.Usage{})
	}
}

// Result and Charges may run while another goroutine settles the
// reservation and admits again through its state: a reader sees the
// admission whole or nothing. Run with -race.
func TestReservation_ReadersRaceSettlement(t *testing.T) {
	l, _ := withRules(t, inFlight(1), tpm(1<<40))
	ctx := context.Background()
	for range 200 {
		r := admit(t, l, tokens("k", 10, 10))
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for range 20 {
					res := r.Result()
					if res.Rule != "" && res.Rule != "inflight" && res.Rule != "tpm" {
						t.Errorf("reader saw rule %q", res.Rule)
					}
					if c := r.Charges(); c != nil && len(c) != 2 {
						t.Errorf("reader saw %d charges", len(c))
					}
				}
			})
		}
		if err := r.Settle(ctx, sluice.Usage{InputTokens: 10, OutputTokens: 3}); err != nil {
			t.Fatal(err)
		}
		next, err := l.Admit(ctx, tokens("k", 10, 10))
		if err != nil {
			t.Fatalf("admit after settlement: %v", err)
		}
		wg.Wait()
		settle(t, next, sluice.Usage{})
	}
	if s := l.Stats(); s.Refused != 0 {
		t.Fatalf("%d refused: a place was not given back", s.Refused)
	}
}

// A refused admission gives its state back unopened; the next admission
// through it is whole.
func TestReservation_RefusalGivesTheStateBack(t *testing.T) {
	l, _ := withRules(t, inFlight(1))
	ctx := context.Background()
	held := admit(t, l, byKey("k"))
	for range 100 {
		if _, err := l.Admit(ctx, byKey("k")); !errors.Is(err, sluice.ErrBusy) {
			t.Fatalf("admit at the cap: %v", err)
		}
		r := admit(t, l, byKey("other"))
		if res := r.Result(); res.Rule != "inflight" || res.Remaining != 0 {
			t.Fatalf("admission after a refusal reads %+v", res)
		}
		settle(t, r, sluice.Usage{})
	}
	settle(t, held, sluice.Usage{})
}

// The sweep may take an expired admission at the moment its owner settles
// it; the owner's Settle then finds it gone and returns, and the engine
// hands the state to the next admission. The sweep must not read the
// state after that: it works on a copy (run with -race). Either the sweep
// or the owner charges the reservation, once.
func TestReservation_SweepRacesSettlement(t *testing.T) {
	ctx := context.Background()
	l, clock := withRules(t, sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "key",
		Metric: sluice.MetricTokens, Limit: 1 << 40, Period: sluice.PeriodDay})
	const rounds, batch = 20, 64
	for range rounds {
		held := make([]*sluice.Reservation, batch)
		for i := range held {
			held[i] = admit(t, l, tokens("k", 10, 0))
		}
		clock.Advance(2 * time.Minute) // past the one-minute deadline and its slack
		swept := make(chan error, 1)
		go func() {
			_, err := l.Sweep(ctx)
			swept <- err
		}()
		next := make([]*sluice.Reservation, batch)
		for i, r := range held {
			settle(t, r, sluice.Usage{InputTokens: 10})
			// The next admission, likely through r's state, with other
			// amounts.
			next[i] = admit(t, l, tokens("k", 1000, 0))
		}
		if err := <-swept; err != nil {
			t.Fatal(err)
		}
		for _, r := range next {
			settle(t, r, sluice.Usage{InputTokens: 1000})
		}
	}
	if got, want := effective(t, l, ident("k"), "daily").Used, int64(rounds*batch*1010); got != want {
		t.Fatalf("budget used %d, want %d: a reservation charged twice, or the sweep read another", got, want)
	}
}

// The zero Reservation, as before the states were pooled, settles nothing
// and reads nothing.
func TestReservation_ZeroValue(t *testing.T) {
	var r sluice.Reservation
	ctx := context.Background()
	if err := r.Settle(ctx, sluice.Usage{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if res := r.Result(); res.Rule != "" || r.Charges() != nil || r.ID() != 0 {
		t.Fatalf("zero Reservation reads %+v", res)
	}
}

// Reservations are made in blocks: every admission still gets one of its
// own, which settles its admission and no other, across block boundaries.
func TestReservation_HandlesOfOneBlockAreApart(t *testing.T) {
	const n = 50 // more than a few blocks
	l, _ := withRules(t, inFlight(n))
	held := make([]*sluice.Reservation, n)
	ids := map[uint64]bool{}
	for i := range held {
		held[i] = admit(t, l, byKey("k"))
		if ids[held[i].ID()] {
			t.Fatalf("two admissions with id %d", held[i].ID())
		}
		ids[held[i].ID()] = true
		for j := range i {
			if held[j] == held[i] {
				t.Fatalf("admissions %d and %d share a Reservation", j, i)
			}
		}
	}
	refuse(t, l, byKey("k"), sluice.ErrBusy)
	for i, r := range held {
		settle(t, r, sluice.Usage{})
		settle(t, r, sluice.Usage{}) // settling again frees nothing more
		// One place is free, and only one.
		again := admit(t, l, byKey("k"))
		refuse(t, l, byKey("k"), sluice.ErrBusy)
		held[i] = again
	}
	for _, r := range held {
		settle(t, r, sluice.Usage{})
	}
}
