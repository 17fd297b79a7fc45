package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

func newLimiter(t *testing.T, s *memstore.Store, clock *storetest.Clock, rules ...sluice.Rule) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(sluice.Options{Store: s, Clock: clock, Rules: rules, ServerID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// admitted counts the admissions of one request for key k until the first
// refusal, at most max.
func admitted(t *testing.T, l *sluice.Limiter, max int) int {
	t.Helper()
	for i := range max {
		_, err := l.Admit(context.Background(), sluice.Request{Identity: sluice.Identity{Key: "k"}})
		if errors.Is(err, sluice.ErrRateLimited) {
			return i
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return max
}

// Sweeping evicts idle counters; a full bucket may go, a bucket that is
// not yet full may not, or it comes back full early.
func TestStore_EvictionKeepsPartlyDrawnBucket(t *testing.T) {
	s := memstore.New(memstore.Options{})
	clock := storetest.NewClock(storetest.Start)
	l := newLimiter(t, s, clock, sluice.Rule{Name: "rps", Kind: sluice.KindRate, Subject: "key", Limit: 3, Window: time.Second})
	if n := admitted(t, l, 1); n != 1 {
		t.Fatalf("admitted %d", n)
	}
	// One unit is a third of a second: 333333333ns and a third. At
	// 333333333ns the bucket still lacks a third of a nanosecond.
	clock.Advance(333_333_333 * time.Nanosecond)
	if _, err := l.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := admitted(t, l, 10); n != 2 {
		t.Fatalf("admitted %d at 333333333ns after one, want 2: the sweep evicted a bucket that was not full", n)
	}
}

// A bucket refilled faster than a unit per nanosecond is drawn in fractions
// of a nanosecond: eviction every admission must not reset it.
func TestStore_EvictionKeepsSubNanosecondDebt(t *testing.T) {
	s := memstore.New(memstore.Options{EvictEvery: 1, EvictScan: 100, EvictIdle: time.Nanosecond})
	clock := storetest.NewClock(storetest.Start)
	l := newLimiter(t, s, clock, sluice.Rule{Name: "fast", Kind: sluice.KindRate, Subject: "key", Limit: 100, Window: time.Nanosecond})
	if n := admitted(t, l, 1000); n != 100 {
		t.Fatalf("admitted %d at one instant into a bucket of 100", n)
	}
}

// Eviction of a full bucket is harmless: it is recreated full.
func TestStore_EvictionOfFullBucketsKeepsLimits(t *testing.T) {
	s := memstore.New(memstore.Options{EvictEvery: 1, EvictScan: 100, EvictIdle: time.Nanosecond})
	clock := storetest.NewClock(storetest.Start)
	l := newLimiter(t, s, clock, sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 5, Window: time.Minute})
	if n := admitted(t, l, 100); n != 5 {
		t.Fatalf("admitted %d with eviction after every admission, want 5", n)
	}
	clock.Advance(time.Minute)
	if _, err := l.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("%d counters left after a sweep of full buckets", got)
	}
	if n := admitted(t, l, 100); n != 5 {
		t.Fatalf("admitted %d after a minute, want 5", n)
	}
}

// A counter a settlement left whole stays for the grace period, so that a
// subject in use does not remake its counters, and goes after it.
func TestStore_EvictionWaitsForGrace(t *testing.T) {
	s := memstore.New(memstore.Options{EvictEvery: 1, EvictScan: 100, EvictIdle: time.Second})
	clock := storetest.NewClock(storetest.Start)
	l := newLimiter(t, s, clock, sluice.Rule{Name: "rps", Kind: sluice.KindRate, Subject: "key", Limit: 1000, Window: time.Second},
		sluice.Rule{Name: "conc", Kind: sluice.KindConcurrency, Subject: "key", Limit: 2})
	ctx := context.Background()
	for _, key := range []string{"a", "b"} {
		r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: key}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Settle(ctx, sluice.Usage{}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(999 * time.Millisecond)
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 4 {
		t.Fatalf("%d counters within the grace period, want 4", got)
	}
	clock.Advance(time.Millisecond)
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("%d counters left after the grace period, want 0", got)
	}
}

// A reservation settled after its counter was evicted, and the counter's
// place taken by another subject, settles on its own subject: the refund
// of one subject never lands in another's bucket.
func TestStore_SettleAfterEvictionLeavesOtherSubjects(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1, EvictEvery: 1, EvictScan: 100, EvictIdle: time.Nanosecond})
	clock := storetest.NewClock(storetest.Start)
	l := newLimiter(t, s, clock, sluice.Rule{Name: "rph", Kind: sluice.KindRate, Subject: "key", Limit: 2, Window: time.Hour})
	ctx := context.Background()
	held, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("%d counters after the sweep, want 0", got)
	}
	for range 2 {
		if _, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: "b"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: "b"}}); !errors.Is(err, sluice.ErrRateLimited) {
		t.Fatalf("third admission of b: %v, want rate limited (a's refund went to b)", err)
	}
}

// Subjects that come once and never again (a churn of keys) leave idle
// counters behind; the new ones pay for dropping them, so that without any
// sweep the store holds at most about twice the counters in use.
func TestStore_EvictionBoundsChurnWithoutSweep(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 4, EvictIdle: time.Second})
	clock := storetest.NewClock(storetest.Start)
	// A unit comes back in 100 ms, so a counter is whole 100 ms after its
	// admission and idle a second later: with an admission every
	// millisecond, about 1,100 counters are in use at any time.
	l := newLimiter(t, s, clock, sluice.Rule{Name: "rps", Kind: sluice.KindRate, Subject: "key", Limit: 10, Window: time.Second})
	const inUse, subjects = 1100, 100_000
	most := 0
	for i := range subjects {
		if _, err := l.Admit(context.Background(), sluice.Request{Identity: sluice.Identity{Key: fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
		if i%500 == 0 {
			most = max(most, s.Len())
		}
	}
	t.Logf("at most %d counters held over %d subjects, %d in use", most, subjects, inUse)
	if most > 5*inUse/2 {
		t.Fatalf("store held up to %d counters for about %d in use: idle counters were not dropped", most, inUse)
	}
}

// The sweep lets go of a shard's lock between chunks of its table, and
// still drops every idle counter of a shard larger than one chunk.
func TestStore_SweepEvictsShardLargerThanAChunk(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1, EvictIdle: time.Second})
	clock := storetest.NewClock(storetest.Start)
	l := newLimiter(t, s, clock, sluice.Rule{Name: "rps", Kind: sluice.KindRate, Subject: "key", Limit: 10, Window: time.Second})
	const subjects = 5000
	for i := range subjects {
		if _, err := l.Admit(context.Background(), sluice.Request{Identity: sluice.Identity{Key: fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Len(); got != subjects {
		t.Fatalf("%d counters within the grace period, want %d", got, subjects)
	}
	clock.Advance(2 * time.Second)
	if _, err := l.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("%d counters left after a sweep of idle ones, want 0", got)
	}
}
