package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// admission is one admitted charge of a rate rule: when, and how much.
type admission struct {
	at     time.Duration // since start
	amount int64
}

// checkRateBound checks that for every run of admissions from one instant
// to a later one, both included, the units admitted never exceed
// burst + limit*elapsed/window, in exact integer arithmetic:
// sum*window <= burst*window + limit*elapsed.
func checkRateBound(t *rapid.T, log []admission, limit, burst int64, window time.Duration) {
	// Admissions at one instant count together: that is the tightest run.
	var at []admission
	for _, a := range log {
		if n := len(at); n > 0 && at[n-1].at == a.at {
			at[n-1].amount += a.amount
			continue
		}
		at = append(at, a)
	}
	w := big.NewInt(int64(window))
	for i := range at {
		sum := new(big.Int)
		for j := i; j < len(at); j++ {
			sum.Add(sum, big.NewInt(at[j].amount))
			lhs := new(big.Int).Mul(sum, w)
			rhs := new(big.Int).Mul(big.NewInt(burst), w)
			rhs.Add(rhs, new(big.Int).Mul(big.NewInt(limit), big.NewInt(int64(at[j].at-at[i].at))))
			if lhs.Cmp(rhs) > 0 {
				t.Fatalf("admitted %s units from %v to %v: more than burst %d + %d per %v", sum, at[i].at, at[j].at, burst, limit, window)
			}
		}
	}
}

func TestRateBucket_PropertyNeverAdmitsMoreThanBurstPlusRefill(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 1000).Draw(t, "limit")
		burst := rapid.Int64Range(0, 2000).Draw(t, "burst") // 0: the limit
		window := time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "window"))
		capacity := burst
		if capacity == 0 {
			capacity = limit
		}
		rule := sluice.Rule{Name: "r", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: limit, Burst: burst, Window: window}
		// Eviction after every admission: an evicted bucket must be
		// exactly one that was full.
		eager := memstore.New(memstore.Options{EvictEvery: 1, EvictScan: 1 << 20, EvictIdle: time.Nanosecond})
		l, clock := newLimiter(t, sluice.Options{Store: eager, Rules: []sluice.Rule{rule}})
		ctx := context.Background()
		var log []admission
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 3).Draw(t, "action") {
			case 0: // advance
				clock.Advance(time.Duration(rapid.Int64Range(0, int64(window)).Draw(t, "advance")))
			case 1, 2: // admit, and after a refusal maybe retry exactly at RetryAfter
				amount := rapid.Int64Range(1, capacity+1).Draw(t, "amount")
				_, err := l.Admit(ctx, tokens("k", amount, 0))
				var rl *sluice.RateLimitError
				switch {
				case err == nil:
					log = append(log, admission{clock.Now().Sub(start), amount})
				case amount > capacity:
					if !errors.Is(err, sluice.ErrTooLarge) {
						t.Fatalf("%d units into a bucket of %d: %v, want too large", amount, capacity, err)
					}
				case errors.As(err, &rl):
					if rl.RetryAfter <= 0 || rl.RetryAfter%time.Millisecond != 0 {
						t.Fatalf("RetryAfter %v: want a positive whole number of milliseconds", rl.RetryAfter)
					}
					if !rapid.Bool().Draw(t, "retry") {
						continue
					}
					// A millisecond early is refused, RetryAfter on the
					// dot is admitted.
					clock.Advance(rl.RetryAfter - time.Millisecond)
					if _, err := l.Admit(ctx, tokens("k", amount, 0)); err == nil {
						t.Fatalf("admitted %v after RetryAfter %v - 1ms", clock.Now().Sub(start), rl.RetryAfter)
					}
					clock.Advance(time.Millisecond)
					if _, err := l.Admit(ctx, tokens("k", amount, 0)); err != nil {
						t.Fatalf("refused at RetryAfter %v: %v", rl.RetryAfter, err)
					}
					log = append(log, admission{clock.Now().Sub(start), amount})
				default:
					t.Fatalf("admit: %v", err)
				}
			case 3: // a burst of small requests until refused
				size := max(1, capacity/rapid.Int64Range(1, 40).Draw(t, "parts"))
				for range capacity/size + 1 {
					if _, err := l.Admit(ctx, tokens("k", size, 0)); err != nil {
						break
					}
					log = append(log, admission{clock.Now().Sub(start), size})
				}
			}
		}
		checkRateBound(t, log, limit, capacity, window)
	})
}

// budgetModel is what a budget should hold: usage settled and
// reservations open.
type budgetModel struct {
	limit   int64
	settled int64
	open    map[*sluice.Reservation]int64
}

func (m *budgetModel) used() int64 {
	u := m.settled
	for _, a := range m.open {
		u += a
	}
	return u
}

// budgetRes is one admission in the model: its amount, deadline, and
// whether the sweep already settled it.
type budgetRes struct {
	r        *sluice.Reservation
	amount   int64
	deadline time.Time
	swept    bool
	done     bool
}

func TestBudget_PropertyUsedIsSettledPlusOpen(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 5000).Draw(t, "limit")
		charge := named(daily(sluice.MetricTokens, limit), "charge")
		release := named(daily(sluice.MetricTokens, limit), "release")
		release.OnExpiry = sluice.ExpiryRelease
		l, clock := newLimiter(t, sluice.Options{Rules: []sluice.Rule{charge, release}})
		ctx := context.Background()
		models := map[string]*budgetModel{
			"charge":  {limit: limit, open: map[*sluice.Reservation]int64{}},
			"release": {limit: limit, open: map[*sluice.Reservation]int64{}},
		}
		var all []*budgetRes
		var overruns int64
		pick := func(label string) *budgetRes {
			var live []*budgetRes
			for _, r := range all {
				if !r.done {
					live = append(live, r)
				}
			}
			if len(live) == 0 {
				return nil
			}
			return live[rapid.IntRange(0, len(live)-1).Draw(t, label)]
		}
		finish := func(r *budgetRes, actual int64) {
			r.done = true
			if r.swept {
				return // the sweep settled it already: a late settle changes nothing
			}
			for _, m := range models {
				delete(m.open, r.r)
				m.settled += actual
			}
		}
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 5).Draw(t, "action") {
			case 0, 1: // admit
				in := rapid.Int64Range(0, limit).Draw(t, "in")
				out := rapid.Int64Range(0, limit/2+1).Draw(t, "out")
				amount := in + out
				req := tokens("k", in, out)
				req.Timeout = time.Duration(rapid.IntRange(1, 5).Draw(t, "timeout_min")) * time.Minute
				want := amount <= limit
				for _, m := range models {
					used := m.used()
					want = want && used+amount <= m.limit && (amount > 0 || used < m.limit)
				}
				r, err := l.Admit(ctx, req)
				switch {
				case err == nil && want:
					for _, m := range models {
						if m.used()+amount > m.limit {
							t.Fatalf("admission pushed %d used past the limit %d", m.used()+amount, m.limit)
						}
						m.open[r] = amount
					}
					all = append(all, &budgetRes{r: r, amount: amount, deadline: r.Deadline()})
				case err == nil:
					t.Fatalf("admitted %d tokens; the model says no (used %d and %d of %d)", amount, models["charge"].used(), models["release"].used(), limit)
				case want:
					t.Fatalf("refused %d tokens (%v); the model says yes", amount, err)
				case amount > limit && !errors.Is(err, sluice.ErrTooLarge):
					t.Fatalf("%d tokens over a limit of %d: %v, want too large", amount, limit, err)
				case amount <= limit && !errors.Is(err, sluice.ErrBudgetExhausted):
					t.Fatalf("refusal %v, want budget exhausted", err)
				}
			case 2: // settle, with an overrun now and then, or no usage at all
				r := pick("settle")
				if r == nil {
					continue
				}
				var u sluice.Usage
				if !rapid.Bool().Draw(t, "unreported") {
					u = sluice.Usage{InputTokens: rapid.Int64Range(0, r.amount+r.amount/2+2).Draw(t, "actual_in")}
				}
				actual := u.InputTokens
				if u.IsZero() {
					actual = r.amount
				}
				if actual > r.amount {
					// One per rule. A late settle that the sweep made moot
					// still counts: the Limiter cannot tell.
					overruns += 2
				}
				if err := r.r.Settle(ctx, u); err != nil {
					t.Fatalf("settle: %v", err)
				}
				finish(r, actual)
			case 3: // release
				r := pick("release")
				if r == nil {
					continue
				}
				if err := r.r.Release(ctx); err != nil {
					t.Fatalf("release: %v", err)
				}
				finish(r, 0)
			case 4: // time passes
				clock.Advance(time.Duration(rapid.Int64Range(0, int64(4*time.Minute)).Draw(t, "advance")))
			case 5: // sweep
				now := clock.Now()
				want := sluice.SweepResult{}
				for _, r := range all {
					if r.swept || r.done || r.deadline.After(now) {
						continue
					}
					r.swept = true
					want.Reservations++
					want.Charged++
					want.Released++
					delete(models["charge"].open, r.r)
					models["charge"].settled += r.amount
					delete(models["release"].open, r.r)
				}
				got, err := l.Sweep(ctx)
				if err != nil || got != want {
					t.Fatalf("sweep: %+v %v, want %+v", got, err, want)
				}
			}
			for name, m := range models {
				e := effective(t, l, ident("k"), name)
				if e.Used != m.used() || e.Used < 0 {
					t.Fatalf("%s: used %d, want settled %d plus open %d", name, e.Used, m.settled, m.used()-m.settled)
				}
				if e.Remaining != max(0, m.limit-e.Used) {
					t.Fatalf("%s: remaining %d with %d of %d used", name, e.Remaining, e.Used, m.limit)
				}
			}
		}
		if got := l.Stats().Overruns; got != overruns {
			t.Fatalf("overruns counted %d, want %d", got, overruns)
		}
	})
}

// snapshot is what Effective reports, without times.
func snapshot(t testingT, l *sluice.Limiter) string {
	all, err := l.Effective(context.Background(), ident("k"))
	if err != nil {
		t.Fatalf("effective: %v", err)
	}
	var s string
	for _, e := range all {
		s += fmt.Sprintf("%s used %d remaining %d; ", e.Rule, e.Used, e.Remaining)
	}
	return s
}

func TestReservation_PropertySettleTwiceIsSettleOnce(t *testing.T) {
	rules := []sluice.Rule{tpm(100_000), daily(sluice.MetricTokens, 100_000), inFlight(10)}
	usage := func(t *rapid.T, label string) sluice.Usage {
		return sluice.Usage{
			InputTokens:  rapid.Int64Range(0, 5000).Draw(t, label+"_in"),
			OutputTokens: rapid.Int64Range(0, 5000).Draw(t, label+"_out"),
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		once, onceClock := newLimiter(t, sluice.Options{Rules: rules})
		many, manyClock := newLimiter(t, sluice.Options{Rules: rules})
		ctx := context.Background()
		for range rapid.IntRange(1, 5).Draw(t, "calls") {
			req := tokens("k", rapid.Int64Range(0, 3000).Draw(t, "max_in"), rapid.Int64Range(0, 3000).Draw(t, "max_out"))
			a, errA := once.Admit(ctx, req)
			b, errB := many.Admit(ctx, req)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("the two limiters disagree: %v and %v", errA, errB)
			}
			if errA != nil {
				continue
			}
			release := rapid.Bool().Draw(t, "release")
			u := usage(t, "usage")
			if release {
				_ = a.Release(ctx)
				_ = b.Release(ctx)
			} else {
				_ = a.Settle(ctx, u)
				_ = b.Settle(ctx, u)
			}
			// Again and again, with other usage or a release: nothing
			// changes.
			for range rapid.IntRange(1, 4).Draw(t, "again") {
				var err error
				if rapid.Bool().Draw(t, "again_release") {
					err = b.Release(ctx)
				} else {
					err = b.Settle(ctx, usage(t, "again_usage"))
				}
				if err != nil {
					t.Fatalf("settling again: %v", err)
				}
			}
			if sa, sb := snapshot(t, once), snapshot(t, many); sa != sb {
				t.Fatalf("settled once: %s\nsettled again: %s", sa, sb)
			}
			d := time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "advance"))
			onceClock.Advance(d)
			manyClock.Advance(d)
		}
		if a, b := once.Stats(), many.Stats(); a != b {
			t.Fatalf("stats %+v and %+v", a, b)
		}
	})
}

func TestReservation_PropertyRefundsNeverGoBelowZero(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 1000).Draw(t, "limit")
		burst := rapid.Int64Range(0, 1000).Draw(t, "burst")
		capacity := burst
		if capacity == 0 {
			capacity = limit
		}
		window := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(time.Hour)).Draw(t, "window"))
		rate := sluice.Rule{Name: "rate", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: limit, Burst: burst, Window: window}
		budget := named(daily(sluice.MetricTokens, rapid.Int64Range(1, 5000).Draw(t, "budget")), "budget")
		budget.Reserve = rapid.SampledFrom([]string{sluice.ReserveWorstCase, sluice.ReserveEstimate}).Draw(t, "reserve")
		l, clock := newLimiter(t, sluice.Options{Rules: []sluice.Rule{rate, budget}})
		ctx := context.Background()
		var open []*sluice.Reservation
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 4).Draw(t, "action") {
			case 0, 1:
				req := tokens("k", rapid.Int64Range(0, capacity).Draw(t, "in"), 0)
				req.Expected = sluice.Usage{InputTokens: rapid.Int64Range(0, req.Max.InputTokens).Draw(t, "expected")}
				if r, err := l.Admit(ctx, req); err == nil {
					open = append(open, r)
				}
			case 2, 3:
				if len(open) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(open)-1).Draw(t, "which")
				r := open[i]
				open = slices.Delete(open, i, i+1)
				var err error
				if rapid.Bool().Draw(t, "release") {
					err = r.Release(ctx)
				} else {
					// Mostly refunds, now and then an overrun.
					err = r.Settle(ctx, sluice.Usage{InputTokens: rapid.Int64Range(0, 2*capacity).Draw(t, "actual")})
				}
				if err != nil {
					t.Fatalf("settle: %v", err)
				}
			case 4:
				clock.Advance(time.Duration(rapid.Int64Range(0, int64(window)).Draw(t, "advance")))
			}
			r := effective(t, l, ident("k"), "rate")
			if r.Remaining < 0 || r.Remaining > capacity || r.Used < 0 || r.Used > capacity {
				t.Fatalf("bucket of %d: used %d remaining %d", capacity, r.Used, r.Remaining)
			}
			b := effective(t, l, ident("k"), "budget")
			if b.Used < 0 || b.Remaining < 0 || b.Remaining > b.Limit || b.Remaining != max(0, b.Limit-b.Used) {
				t.Fatalf("budget of %d: used %d remaining %d", b.Limit, b.Used, b.Remaining)
			}
		}
		// Once every reservation is released and the deepest debt (one
		// burst below empty) has refilled, the bucket is exactly full.
		for _, r := range open {
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Duration(2*capacity)*window/time.Duration(limit) + window)
		if r := effective(t, l, ident("k"), "rate"); r.Remaining != capacity {
			t.Fatalf("bucket of %d holds %d after refilling", capacity, r.Remaining)
		}
	})
}
