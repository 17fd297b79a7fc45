package pgstore_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
)

// groupOf holds the first call of s until n more operations are queued
// behind it, so that those n go together as the second call. It returns the
// sizes of the calls made, for the test to check.
func groupOf(t *testing.T, s *pgstore.Store, n int) func() []int {
	var mu sync.Mutex
	var sizes []int
	var first atomic.Bool
	pgstore.SetExecHook(s, func(ops int) {
		mu.Lock()
		sizes = append(sizes, ops)
		mu.Unlock()
		if !first.CompareAndSwap(false, true) {
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for pgstore.Queued(s) < n {
			if time.Now().After(deadline) {
				t.Errorf("%d operations queued after 10 s, want %d", pgstore.Queued(s), n)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}
}

var nextBatchID = rand.Uint64() >> 1

func batch(charges ...sluice.Charge) *sluice.Batch {
	return &sluice.Batch{ID: atomic.AddUint64(&nextBatchID, 1), Deadline: time.Now().Add(time.Minute), Charges: charges}
}

func budgetCharge(rule uint64, subject string, limit, amount int64) sluice.Charge {
	return sluice.Charge{Key: sluice.CounterKey{Rule: rule, Subject: subject, Period: 1}, Kind: sluice.KindBudget,
		Limit: limit, Amount: amount, Actual: amount, PeriodEnd: time.Now().Add(24 * time.Hour)}
}

func rateCharge(rule uint64, subject string, limit, amount int64) sluice.Charge {
	return sluice.Charge{Key: sluice.CounterKey{Rule: rule, Subject: subject}, Kind: sluice.KindRate,
		Limit: limit, Window: time.Hour, Amount: amount, Actual: amount}
}

// reservedOf reads a budget counter's reserved and used amounts.
func reservedOf(t *testing.T, schema string, rule uint64, subject string) (reserved, used int64) {
	t.Helper()
	err := schemaPool(t, schema).QueryRow(context.Background(),
		"SELECT reserved, used FROM sluice_counters WHERE rule = $1 AND subject = $2", int64(rule), subject).Scan(&reserved, &used)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return reserved, used
}

// TestGroup_ConcurrentAdmissionsOnOneSubjectAdmitExactlyTheLimit sends 300
// admissions at once through a Limiter on the database clock, on one
// subject: a rate rule of 50 a day admits exactly 50 and a budget of 3000
// tokens exactly 30 requests of 100, however they were grouped. Settling the
// 30 at 60 tokens each leaves exactly 1200, which admits exactly 12 more.
func TestGroup_ConcurrentAdmissionsOnOneSubjectAdmitExactlyTheLimit(t *testing.T) {
	s := openStore(t, testSchema(t), pgstore.Options{MaxConns: 8})
	rate := sluice.Rule{Name: "per_day", Kind: sluice.KindRate, Subject: "key", Limit: 50, Window: 24 * time.Hour}
	budget := sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
		Limit: 3000, Period: sluice.PeriodDay}
	ctx := context.Background()
	storm := func(l *sluice.Limiter, id sluice.Identity, n int) []*sluice.Reservation {
		var mu sync.Mutex
		var admitted []*sluice.Reservation
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				r, err := l.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 100}})
				var rateErr *sluice.RateLimitError
				var budgetErr *sluice.BudgetError
				switch {
				case err == nil:
					mu.Lock()
					admitted = append(admitted, r)
					mu.Unlock()
				case !errors.As(err, &rateErr) && !errors.As(err, &budgetErr):
					t.Errorf("admit: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		return admitted
	}
	calls0, ops0 := pgstore.GroupCalls(s)

	byRate, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{rate}})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(storm(byRate, sluice.Identity{Key: "k"}, 300)); got != 50 {
		t.Errorf("rate of 50 a day admitted %d of 300", got)
	}

	byBudget, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{budget}})
	if err != nil {
		t.Fatal(err)
	}
	id := sluice.Identity{Workspace: "w"}
	first := storm(byBudget, id, 300)
	if len(first) != 30 {
		t.Fatalf("budget of 3000 admitted %d requests of 100, want 30", len(first))
	}
	var wg sync.WaitGroup
	for _, r := range first {
		wg.Go(func() {
			if err := r.Settle(ctx, sluice.Usage{InputTokens: 60}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if used := effectiveUsed(t, byBudget, id, "daily"); used != 1800 {
		t.Fatalf("after settling 30 at 60 tokens the budget has used %d, want 1800", used)
	}
	if got := len(storm(byBudget, id, 100)); got != 12 {
		t.Errorf("the 1200 tokens left admitted %d requests of 100, want 12", got)
	}

	calls, ops := pgstore.GroupCalls(s)
	t.Logf("%d operations in %d calls", ops-ops0, calls-calls0)
	if calls-calls0 >= ops-ops0 {
		t.Errorf("%d operations in %d calls: never grouped", ops-ops0, calls-calls0)
	}
}

// TestGroup_RefusedAdmissionLeavesTheOthersAlone sends four admissions as
// one call. A and B each reserve 8 of a budget of 10 on subject x: exactly
// one fits. C reserves 1 on y. D reserves 2 on x and one unit of a drained
// rate bucket: refused, so it charges x nothing, whatever its place in the
// group. In the end x holds 8, y holds 1, the bucket is as drained as before.
func TestGroup_RefusedAdmissionLeavesTheOthersAlone(t *testing.T) {
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{})
	ctx := context.Background()
	const budgetRule, rateRule = 11, 12
	drain := batch(rateCharge(rateRule, "z", 1, 1))
	if ok, err := admitBatch(ctx, s, time.Now(), drain); err != nil || !ok {
		t.Fatalf("drain the bucket: %v %v", ok, err)
	}
	sizes := groupOf(t, s, 4)

	lead := batch(budgetCharge(budgetRule, "lead", 10, 1))
	a := batch(budgetCharge(budgetRule, "x", 10, 8))
	b := batch(budgetCharge(budgetRule, "x", 10, 8))
	c := batch(budgetCharge(budgetRule, "y", 10, 1))
	d := batch(budgetCharge(budgetRule, "x", 10, 2), rateCharge(rateRule, "z", 1, 1))
	results := map[*sluice.Batch]bool{}
	found := map[*sluice.Batch][]sluice.ChargeResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	admit := func(bt *sluice.Batch) {
		wg.Go(func() {
			res := make([]sluice.ChargeResult, len(bt.Charges))
			ok, err := s.Admit(ctx, time.Now(), *bt, res)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			results[bt], found[bt] = ok, res
			mu.Unlock()
		})
	}
	admit(lead)
	for pgstore.Queued(s) == 0 && len(sizes()) == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, bt := range []*sluice.Batch{a, b, c, d} {
		admit(bt)
	}
	wg.Wait()
	if got := sizes(); !slices.Equal(got, []int{1, 4}) {
		t.Fatalf("calls of %v operations, want [1 4]", got)
	}
	if !results[lead] || results[a] == results[b] || !results[c] || results[d] {
		t.Fatalf("admitted lead %v, a %v, b %v, c %v, d %v; want true, one of a and b, true, false",
			results[lead], results[a], results[b], results[c], results[d])
	}
	refused := a
	if results[a] {
		refused = b
	}
	if ch := found[refused][0]; ch.Allowed || ch.Used != 8 || ch.Remaining != 2 {
		t.Errorf("the refused one of a and b: allowed %v used %d remaining %d, want false, 8, 2", ch.Allowed, ch.Used, ch.Remaining)
	}
	for i, ch := range found[d] {
		if d.Charges[i].Kind == sluice.KindRate && (ch.Allowed || ch.RetryAfter <= 0) {
			t.Errorf("d's rate charge: allowed %v retry after %v, want refused with a wait", ch.Allowed, ch.RetryAfter)
		}
	}
	if reserved, _ := reservedOf(t, schema, budgetRule, "x"); reserved != 8 {
		t.Errorf("x holds %d, want 8", reserved)
	}
	if reserved, _ := reservedOf(t, schema, budgetRule, "y"); reserved != 1 {
		t.Errorf("y holds %d, want 1", reserved)
	}
	peek := make([]sluice.ChargeResult, 1)
	if err := s.Peek(ctx, time.Now(), *batch(rateCharge(rateRule, "z", 1, 1)), peek); err != nil {
		t.Fatal(err)
	}
	if ch := peek[0]; ch.Remaining != 0 {
		t.Errorf("the drained bucket has %d left after d was refused, want 0", ch.Remaining)
	}
}

// TestGroup_SettlingTwiceInOneGroupChargesOnce settles one batch from two
// callers in the same call, beside an admission: the budget is charged the
// actual usage once and its reservation released once.
func TestGroup_SettlingTwiceInOneGroupChargesOnce(t *testing.T) {
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{})
	ctx := context.Background()
	const rule = 21
	settled := batch(budgetCharge(rule, "w", 1000, 100))
	if ok, err := admitBatch(ctx, s, time.Now(), settled); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	settled.Charges[0].Actual = 30
	sizes := groupOf(t, s, 3)
	var wg sync.WaitGroup
	wg.Go(func() {
		if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "lead", 1000, 1))); err != nil || !ok {
			t.Errorf("lead: %v %v", ok, err)
		}
	})
	for len(sizes()) == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 2 {
		wg.Go(func() {
			// Each caller settles its own copy, as two replicas would.
			b := *settled
			b.Charges = slices.Clone(settled.Charges)
			if err := s.Settle(ctx, time.Now(), b); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Go(func() {
		if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "w", 1000, 10))); err != nil || !ok {
			t.Errorf("admit beside: %v %v", ok, err)
		}
	})
	wg.Wait()
	if got := sizes(); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("calls of %v operations, want [1 3]", got)
	}
	if reserved, used := reservedOf(t, schema, rule, "w"); reserved != 10 || used != 30 {
		t.Fatalf("budget reserved %d used %d, want 10 (the admission beside) and 30 (settled once)", reserved, used)
	}
}

// TestGroup_FailingCallReachesEveryCaller holds the counter row of subject x
// locked from another transaction while five admissions on x go as one
// call: every one of the five gets an error within the store's timeout
// (counted from its own start, in the queue included), nothing is charged
// once the releases of admissions whose callers gave up have run (the
// group may commit when the row is freed, after its callers left), and the
// store works once the row is free.
func TestGroup_FailingCallReachesEveryCaller(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{Timeout: 500 * time.Millisecond})
	ctx := context.Background()
	const rule = 31
	if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "x", 1000, 1))); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	tx, err := schemaPool(t, schema).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM sluice_counters WHERE rule = $1 AND subject = 'x' FOR UPDATE", int64(rule)); err != nil {
		t.Fatal(err)
	}

	sizes := groupOf(t, s, 5)
	var wg sync.WaitGroup
	wg.Go(func() {
		if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "lead", 1000, 1))); err != nil || !ok {
			t.Errorf("lead: %v %v", ok, err)
		}
	})
	for len(sizes()) == 0 {
		time.Sleep(time.Millisecond)
	}
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "x", 1000, 10)))
		})
	}
	wg.Wait()
	if got := sizes(); !slices.Equal(got, []int{1, 5}) {
		t.Fatalf("calls of %v operations, want [1 5]", got)
	}
	for i, err := range errs {
		if err == nil || !strings.HasPrefix(err.Error(), "pgstore: admit: ") {
			t.Errorf("caller %d: %v, want the call's error", i, err)
		}
	}
	t.Logf("the error: %v", errs[0])
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		reserved, _ := reservedOf(t, schema, rule, "x")
		if reserved == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("x holds %d 5s after the failed call, want 1", reserved)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "x", 1000, 10))); err != nil || !ok {
		t.Fatalf("admit after the row is free: %v %v", ok, err)
	}
}

// TestGroup_OneBadOperationFailsAlone puts an admission whose arithmetic
// fails (a rate of zero, which no Limiter sends: a division by zero; budget
// sums saturate rather than overflow) in a call with two good ones: the
// server refuses the call as a whole, having committed nothing, so each
// operation is run again on its own; the bad one fails and the good ones
// are admitted, once.
func TestGroup_OneBadOperationFailsAlone(t *testing.T) {
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{})
	ctx := context.Background()
	const rule = 41
	if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "huge", math.MaxInt64, 1))); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	sizes := groupOf(t, s, 3)
	var wg sync.WaitGroup
	wg.Go(func() {
		if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "lead", 1000, 1))); err != nil || !ok {
			t.Errorf("lead: %v %v", ok, err)
		}
	})
	for len(sizes()) == 0 {
		time.Sleep(time.Millisecond)
	}
	var badErr error
	wg.Go(func() {
		_, badErr = admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "huge", math.MaxInt64, math.MaxInt64), rateCharge(rule+1, "zero", 0, 1)))
	})
	for range 2 {
		wg.Go(func() {
			if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "good", 1000, 10))); err != nil || !ok {
				t.Errorf("good: %v %v", ok, err)
			}
		})
	}
	wg.Wait()
	if got := sizes(); !slices.Equal(got[:2], []int{1, 3}) || len(got) != 5 {
		t.Fatalf("calls of %v operations, want [1 3] then three of 1", got)
	}
	if badErr == nil || !strings.Contains(badErr.Error(), "22012") {
		t.Errorf("the failing admission: %v, want division_by_zero", badErr)
	}
	if reserved, _ := reservedOf(t, schema, rule, "good"); reserved != 20 {
		t.Errorf("good holds %d, want 20", reserved)
	}
	if reserved, _ := reservedOf(t, schema, rule, "huge"); reserved != 1 {
		t.Errorf("huge holds %d, want 1", reserved)
	}
}
