package counter

import (
	"math"
	"testing"
)

const (
	second = int64(1e9)
	minute = 60 * second
)

// A step is one call on a counter at a fixed time, and what it must find.
type rateStep struct {
	at     int64 // ns after t0
	amount int64 // charged if positive and allowed; with adjust, moved by
	adjust bool
	want   Result // for a check
}

// runRate runs steps on one bucket from t0, applying each allowed check
// as an admission would.
func runRate(t *testing.T, b Bucket, steps []rateStep) {
	t.Helper()
	const t0 = int64(1_772_618_400) * second
	var s Rate
	for i, st := range steps {
		now := t0 + st.at
		if st.adjust {
			s = b.Adjust(s, st.amount, now)
			continue
		}
		next, got := b.Check(s, st.amount, now)
		want := st.want
		if want.ResetAt != 0 {
			want.ResetAt += t0
		}
		if got != want {
			t.Fatalf("step %d at %dns: check %d = %+v, want %+v", i, st.at, st.amount, got, want)
		}
		if got.Allowed {
			s = next
		}
	}
}

// 3 per second, burst 3: the burst is admitted at once, then one every
// third of a second, exactly.
func TestBucket_Steps(t *testing.T) {
	third := second / 3 // 333333333 ns, a third of a ns short
	runRate(t, Bucket{Limit: 3, Burst: 3, Window: second}, []rateStep{
		{at: 0, amount: 1, want: Result{Allowed: true, Remaining: 2, Used: 1, ResetAt: third + 1}},
		{at: 0, amount: 2, want: Result{Allowed: true, Remaining: 0, Used: 3, ResetAt: second}},
		{at: 0, amount: 1, want: Result{Remaining: 0, Used: 3, ResetAt: second, RetryAfter: third + 1}},
		// A third of a second less a third of a nanosecond: not yet.
		{at: third, amount: 1, want: Result{Remaining: 0, Used: 3, ResetAt: second, RetryAfter: 1}},
		{at: third + 1, amount: 1, want: Result{Allowed: true, Remaining: 0, Used: 3, ResetAt: second + third + 1}},
		// A check of nothing reads the level.
		{at: second + third + 1, amount: 0, want: Result{Allowed: true, Remaining: 3, Used: 0, ResetAt: second + third + 1}},
	})
}

// A refund gives room back, never past a full bucket; an overrun draws the
// bucket into debt, at most one burst below empty.
func TestBucket_AdjustSteps(t *testing.T) {
	runRate(t, Bucket{Limit: 10, Burst: 10, Window: minute}, []rateStep{
		{at: 0, amount: 10, want: Result{Allowed: true, Remaining: 0, Used: 10, ResetAt: minute}},
		{at: 0, amount: -4, adjust: true},
		{at: 0, amount: 4, want: Result{Allowed: true, Remaining: 0, Used: 10, ResetAt: minute}},
		{at: 0, amount: -100, adjust: true}, // refunded to full, no further
		{at: 0, amount: 10, want: Result{Allowed: true, Remaining: 0, Used: 10, ResetAt: minute}},
		{at: 0, amount: 100, adjust: true}, // debt capped at one burst
		{at: 0, amount: 1, want: Result{Remaining: 0, Used: 10, ResetAt: 2 * minute, RetryAfter: minute + 6*second}},
		// Empty, not in debt: a check of nothing fits exactly.
		{at: minute, amount: 0, want: Result{Allowed: true, Remaining: 0, Used: 10, ResetAt: 2 * minute}},
		{at: 2 * minute, amount: 10, want: Result{Allowed: true, Remaining: 0, Used: 10, ResetAt: 3 * minute}},
	})
}

// A raised limit keeps the units used, not the time until full.
func TestBucket_ChangedLimitKeepsUnitsUsed(t *testing.T) {
	const now = 1000 * second
	small := Bucket{Limit: 10, Burst: 10, Window: minute}
	s, res := small.Check(Rate{}, 6, now)
	if !res.Allowed || res.Remaining != 4 {
		t.Fatalf("check 6 of 10 = %+v", res)
	}
	big := Bucket{Limit: 20, Burst: 20, Window: minute}
	if _, res := big.Check(s, 0, now); res.Remaining != 14 || res.Used != 6 {
		t.Fatalf("at limit 20 the bucket has %d left (used %d), want 14 (6)", res.Remaining, res.Used)
	}
}

// Figures at the edges of int64 neither overflow nor admit what does not
// fit.
func TestBucket_HugeFigures(t *testing.T) {
	b := Bucket{Limit: 1 << 62, Burst: 1 << 62, Window: minute}
	if _, res := b.Check(Rate{}, 1<<62, 0); !res.Allowed || res.Remaining != 0 || res.ResetAt != minute {
		t.Fatalf("a whole huge burst: %+v", res)
	}
	small := Bucket{Limit: 1, Burst: 1, Window: math.MaxInt64}
	if _, res := small.Check(Rate{}, 2, 0); res.Allowed || res.RetryAfter <= 0 {
		t.Fatalf("two units into a bucket of one: %+v", res)
	}
}

func TestBudget_Steps(t *testing.T) {
	const end = int64(86_400) * second
	var s Budget
	steps := []struct {
		op             string // check, reserve or settle
		amount, actual int64
		want           Result
	}{
		{op: "check", amount: 60, want: Result{Allowed: true, Remaining: 40, Used: 60, ResetAt: end}},
		{op: "reserve", amount: 60},
		{op: "check", amount: 50, want: Result{Remaining: 40, Used: 60, ResetAt: end}},
		{op: "settle", amount: 60, actual: 20}, // refund 40
		{op: "check", amount: 80, want: Result{Allowed: true, Remaining: 0, Used: 100, ResetAt: end}},
		{op: "reserve", amount: 80},
		{op: "settle", amount: 80, actual: 90}, // an overrun is charged in full
		{op: "check", amount: 0, want: Result{Remaining: 0, Used: 110, ResetAt: end}},
	}
	for i, st := range steps {
		switch st.op {
		case "check":
			if got := s.Check(100, st.amount, end); got != st.want {
				t.Fatalf("step %d: check %d = %+v, want %+v", i, st.amount, got, st.want)
			}
		case "reserve":
			s = s.Reserve(st.amount, end)
		case "settle":
			s = s.Settle(st.amount, st.actual, end)
		}
	}
	if s.Idle(end - 1) {
		t.Fatal("a budget with usage is idle before its period ends")
	}
	if !s.Idle(end) {
		t.Fatal("a budget is not idle once its period ended")
	}
}

func TestLeases_Steps(t *testing.T) {
	var ls []Lease
	check := func(now int64, want Result) {
		t.Helper()
		ls = Live(ls, now)
		if got := CheckLeases(ls, 2, now); got != want {
			t.Fatalf("at %d: %+v, want %+v", now, got, want)
		}
	}
	check(0, Result{Allowed: true, Remaining: 1, Used: 1})
	ls = append(ls, Lease{ID: 1, Expiry: 100})
	check(10, Result{Allowed: true, Remaining: 0, Used: 2, ResetAt: 100})
	ls = append(ls, Lease{ID: 2, Expiry: 50})
	check(20, Result{Remaining: 0, Used: 2, ResetAt: 50, RetryAfter: 30})
	check(50, Result{Allowed: true, Remaining: 0, Used: 2, ResetAt: 100}) // lease 2 expired
	ls = Drop(ls, 1)
	ls = Drop(ls, 1) // freeing twice frees once
	check(60, Result{Allowed: true, Remaining: 1, Used: 1})
}

// A budget given figures no call produces saturates at Ceiling, never
// wraps negative, and once saturated refuses whatever its limit.
func TestBudget_SaturatesAtCeiling(t *testing.T) {
	const end = int64(86_400) * second
	steps := []struct {
		name                 string
		start                Budget
		amount, actual       int64
		wantUsed, wantReserv int64
	}{
		{"overrun of MaxInt64", Budget{Used: 10}, 5, math.MaxInt64, Ceiling, 0},
		{"two huge settlements", Budget{Used: Ceiling - 1}, 0, Ceiling, Ceiling, 0},
		{"negative actual counts nothing", Budget{Used: 10, Reserved: 5}, 5, math.MinInt64, 10, 5},
		{"negative reservation frees nothing more", Budget{Used: 10, Reserved: 5}, math.MinInt64, 0, 10, 5},
		{"a wrapped counter counts as empty, then saturates", Budget{Used: -9223372036854412069}, 0, math.MaxInt64, Ceiling, 0},
	}
	for _, st := range steps {
		got := st.start.Reserve(st.amount, end).Settle(st.amount, st.actual, end)
		if got.Used != st.wantUsed || got.Reserved != st.wantReserv {
			t.Errorf("%s: %+v, want used %d reserved %d", st.name, got, st.wantUsed, st.wantReserv)
		}
	}
	full := Budget{Used: Ceiling}
	for _, limit := range []int64{Ceiling, Ceiling + 1, math.MaxInt64} {
		if res := full.Check(limit, 1, end); res.Allowed || res.Used != Ceiling || res.Remaining != 0 {
			t.Errorf("a saturated budget under limit %d: %+v, want refused", limit, res)
		}
	}
	if res := (Budget{Reserved: math.MaxInt64}).Check(math.MaxInt64, math.MaxInt64, end); res.Allowed || res.Used < 0 {
		t.Errorf("MaxInt64 reserved and asked: %+v, want refused, never negative", res)
	}
	if res := (Budget{}).Check(math.MinInt64, 0, end); res.Allowed || res.Remaining != 0 {
		t.Errorf("a negative limit: %+v, want refused with nothing remaining", res)
	}
	if res := (Budget{}).Check(100, math.MinInt64, end); !res.Allowed || res.Used != 0 {
		t.Errorf("a negative amount counts as nothing: %+v", res)
	}
}
