package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestStore_ManyChargesInOneSlot admits, refuses and settles batches of more
// charges than the script reads or packs in one call.
func TestStore_ManyChargesInOneSlot(t *testing.T) {
	s := openStore(t, redisstore.Options{URL: redisURL(t), PinTime: true})
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	batch := func(id uint64, rates int, amount int64) *sluice.Batch {
		b := &sluice.Batch{ID: id, Deadline: now.Add(time.Minute)}
		for i := range rates {
			b.Charges = append(b.Charges, sluice.Charge{Key: sluice.CounterKey{Rule: uint64(i + 1), Subject: "t"},
				Kind: sluice.KindRate, Limit: 100, Window: time.Minute, Amount: amount, Actual: amount / 2})
		}
		b.Charges = append(b.Charges,
			sluice.Charge{Key: sluice.CounterKey{Rule: 1000, Subject: "t"}, Kind: sluice.KindConcurrency, Limit: 2, Amount: 1},
			sluice.Charge{Key: sluice.CounterKey{Rule: 1001, Subject: "t", Period: int64(rates)}, Kind: sluice.KindBudget, Limit: 1000,
				PeriodEnd: now.Add(time.Hour), Amount: 10, Actual: 4})
		return b
	}
	for _, rates := range []int{23, 24, 25, 31, 32, 33, 70} {
		b := batch(uint64(rates), rates, 60)
		res := make([]sluice.ChargeResult, len(b.Charges))
		ok, err := s.Admit(ctx, now, *b, res)
		if err != nil || !ok {
			t.Fatalf("%d rates: admit %v %v", rates, ok, err)
		}
		for i, c := range res[:rates] {
			if !c.Allowed || c.Remaining != 40 || c.Used != 60 || c.ResetAt.IsZero() {
				t.Fatalf("%d rates: charge %d: %+v", rates, i, c)
			}
		}
		if c := res[rates]; !c.Allowed || c.Used != 1 || c.Remaining != 1 {
			t.Fatalf("%d rates: concurrency %+v", rates, c)
		}
		if c := res[rates+1]; !c.Allowed || c.Used != 10 || c.Remaining != 990 {
			t.Fatalf("%d rates: budget %+v", rates, c)
		}
		// 60 more of each rate do not fit: refused, nothing applied.
		refused := batch(uint64(rates+1000), rates, 60)
		res = make([]sluice.ChargeResult, len(refused.Charges))
		if ok, err := s.Admit(ctx, now, *refused, res); err != nil || ok {
			t.Fatalf("%d rates: second admit %v %v", rates, ok, err)
		}
		for i, c := range res[:rates] {
			if c.Allowed || c.Remaining != 40 || c.RetryAfter != 12*time.Second {
				t.Fatalf("%d rates: refused charge %d: %+v", rates, i, c)
			}
		}
		if err := s.Settle(ctx, now, *b); err != nil {
			t.Fatalf("%d rates: settle %v", rates, err)
		}
		peek := batch(uint64(rates+2000), rates, 0)
		res = make([]sluice.ChargeResult, len(peek.Charges))
		if err := s.Peek(ctx, now, *peek, res); err != nil {
			t.Fatal(err)
		}
		for i, c := range res[:rates] {
			if c.Remaining != 70 {
				t.Fatalf("%d rates: after settling 30 of 60, charge %d remaining %d, want 70", rates, i, c.Remaining)
			}
		}
		if c := res[rates]; c.Used != 0 {
			t.Fatalf("%d rates: lease not freed: %+v", rates, c)
		}
		if c := res[rates+1]; c.Used != 4 {
			t.Fatalf("%d rates: budget used %d after settling 4, want 4", rates, c.Used)
		}
		// Start afresh for the next size.
		now = now.Add(time.Hour)
	}
}

// TestStore_ConcurrentAdmissionsAtALimit sends many concurrent admissions of
// one subject, which the store groups into shared script calls: exactly the
// limit is admitted, and a refused admission in a group leaves the others'
// charges alone.
func TestStore_ConcurrentAdmissionsAtALimit(t *testing.T) {
	s := openStore(t, redisstore.Options{URL: redisURL(t), PinTime: true})
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	const callers, limit = 64, 20
	var admitted, refused atomic.Int64
	var ids atomic.Uint64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range 3 {
				b := &sluice.Batch{ID: ids.Add(1), Deadline: now.Add(time.Minute), Charges: []sluice.Charge{
					{Key: sluice.CounterKey{Rule: 1, Subject: "t"}, Kind: sluice.KindRate, Limit: 1000, Window: time.Minute, Amount: 1},
					{Key: sluice.CounterKey{Rule: 2, Subject: "t"}, Kind: sluice.KindConcurrency, Limit: limit, Amount: 1},
				}}
				res := make([]sluice.ChargeResult, len(b.Charges))
				ok, err := s.Admit(ctx, now, *b, res)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					admitted.Add(1)
				} else {
					refused.Add(1)
					if res[1].Allowed || !res[0].Allowed {
						t.Errorf("refused admission: %+v", res)
					}
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != limit || refused.Load() != 3*callers-limit {
		t.Fatalf("admitted %d, refused %d; want %d and %d", admitted.Load(), refused.Load(), limit, 3*callers-limit)
	}
	// The refused admissions drew nothing from the rate: exactly one unit
	// per admission is used.
	peek := &sluice.Batch{ID: ids.Add(1), Deadline: now.Add(time.Minute), Charges: []sluice.Charge{
		{Key: sluice.CounterKey{Rule: 1, Subject: "t"}, Kind: sluice.KindRate, Limit: 1000, Window: time.Minute},
		{Key: sluice.CounterKey{Rule: 2, Subject: "t"}, Kind: sluice.KindConcurrency, Limit: limit},
	}}
	res := make([]sluice.ChargeResult, len(peek.Charges))
	if err := s.Peek(ctx, now, *peek, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Used != limit || res[1].Used != limit {
		t.Fatalf("rate used %d, leases held %d; want %d each", res[0].Used, res[1].Used, limit)
	}
}
