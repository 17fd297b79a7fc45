package pgstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestConformance runs the whole suite, each scenario in its own schema,
// with the store's time pinned to the suite's manual clock.
func TestConformance(t *testing.T) {
	postgresURL(t)
	storetest.Run(t, func(t *testing.T) sluice.Store {
		return openStore(t, testSchema(t), pgstore.Options{PinTime: true})
	})
}

// TestSweep_RacesSettleAndOtherSweepersExactlyOnce opens 700 reservations
// of 10 tokens (more than one sweep transaction takes), lets them expire,
// then releases every one of them from four goroutines while three stores
// sweep at once. Each reservation is settled once, by a release (0 tokens)
// or by a sweep (10 tokens, on_expiry: charge), never both: the budget ends
// at exactly 10 tokens per swept reservation, with nothing left reserved.
// The sweeps start once a third has been released.
func TestSweep_RacesSettleAndOtherSweepersExactlyOnce(t *testing.T) {
	schema := testSchema(t)
	clock := storetest.NewClock(storetest.Start)
	stores := []*pgstore.Store{
		openStore(t, schema, pgstore.Options{PinTime: true}),
		openStore(t, schema, pgstore.Options{PinTime: true}),
		openStore(t, schema, pgstore.Options{PinTime: true}),
	}
	rule := sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
		Limit: 1 << 40, Period: sluice.PeriodDay}
	limiters := make([]*sluice.Limiter, len(stores))
	for i, s := range stores {
		l, err := sluice.New(sluice.Options{Store: s, Clock: clock, Rules: []sluice.Rule{rule}, DefaultTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		limiters[i] = l
	}
	ctx := context.Background()
	id := sluice.Identity{Workspace: "w"}
	const n = 700
	reservations := make([]*sluice.Reservation, n)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 4 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				r, err := limiters[0].Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 10}})
				if err != nil {
					t.Error(err)
					return
				}
				reservations[i] = r
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	clock.Advance(2 * time.Minute)

	var swept atomic.Int64
	next.Store(0)
	start := make(chan struct{})
	for _, l := range limiters {
		wg.Go(func() {
			<-start
			for next.Load() < n/3 { // let the releases get going
				time.Sleep(time.Millisecond)
			}
			res, err := l.Sweep(ctx)
			if err != nil {
				t.Error(err)
			}
			if res.Charged != res.Reservations {
				t.Errorf("sweep %+v: every reservation has one budget charge", res)
			}
			swept.Add(int64(res.Reservations))
		})
	}
	for range 4 {
		wg.Go(func() {
			<-start
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				if err := reservations[i].Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if res, err := limiters[0].Sweep(ctx); err != nil || res.Reservations != 0 {
		t.Fatalf("last sweep %+v %v: nothing should be left", res, err)
	}
	var used, reserved int64
	if err := schemaPool(t, schema).QueryRow(ctx, "SELECT used, reserved FROM sluice_counters WHERE reserved <> 0 OR used <> 0").Scan(&used, &reserved); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d reservations swept, the rest released", swept.Load(), n)
	if used != 10*swept.Load() || reserved != 0 {
		t.Fatalf("budget used %d reserved %d after %d sweeps of 10 tokens, want %d and 0", used, reserved, swept.Load(), 10*swept.Load())
	}
}

// TestSweep_DropsIdleCountersWhichComeBack checks the housekeeping of the
// sweep: an expired lease is deleted, counters idle for the grace period are
// dropped (a full bucket, an unused concurrency cap), a budget with usage in
// its period is kept, and a subject seen again starts from the same state as
// if its counters had stayed.
func TestSweep_DropsIdleCountersWhichComeBack(t *testing.T) {
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{PinTime: true})
	clock := storetest.NewClock(storetest.Start)
	rules := []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 2, Window: time.Minute},
		{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1},
		{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodDay},
	}
	l, err := sluice.New(sluice.Options{Store: s, Clock: clock, Rules: rules, DefaultTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool := schemaPool(t, schema)
	count := func(table string) (n int) {
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	req := sluice.Request{Identity: sluice.Identity{Workspace: "w", Key: "k"}, Max: sluice.Usage{InputTokens: 100}}
	r, err := l.Admit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(ctx, sluice.Usage{InputTokens: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(ctx, req); err != nil { // held, never settled
		t.Fatal(err)
	}
	if c, ls := count("sluice_counters"), count("sluice_leases"); c != 3 || ls != 1 {
		t.Fatalf("%d counters and %d leases, want 3 and 1", c, ls)
	}
	clock.Advance(9 * time.Minute) // the lease and reservation expired, the grace period not over
	if res, err := l.Sweep(ctx); err != nil || res.Reservations != 1 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if c, ls := count("sluice_counters"), count("sluice_leases"); c != 3 || ls != 0 {
		t.Fatalf("after the first sweep %d counters and %d leases, want 3 and 0", c, ls)
	}
	clock.Advance(2 * time.Minute)
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if c := count("sluice_counters"); c != 1 {
		t.Fatalf("after the grace period %d counters, want the budget's alone", c)
	}
	res, err := l.Admit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	eff, err := l.Effective(ctx, req.Identity)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"rpm": 1, "inflight": 1, "daily": 40 + 100 + 100}
	for _, e := range eff {
		if e.Used != want[e.Rule] {
			t.Errorf("%s used %d, want %d", e.Rule, e.Used, want[e.Rule])
		}
	}
	_ = res
}
