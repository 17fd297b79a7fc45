package storetest

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
)

// propertyBudget bounds each property scenario: a store over the network
// runs fewer cases rather than a longer test.
const propertyBudget = 5 * time.Second

// edges are the int64 figures most likely to break arithmetic.
var edges = []int64{0, 1, -1, 2, 100, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1,
	sluice.MaxTokens, sluice.MaxTokens + 1, sluice.MaxCost, sluice.MaxCost + 1, 1 << 51, sluice.CounterCeiling - 1,
	sluice.CounterCeiling, sluice.CounterCeiling + 1, 1 << 62}

// anyInt64 draws any int64, the edges and small figures more often.
func anyInt64() *rapid.Generator[int64] {
	return rapid.OneOf(rapid.SampledFrom(edges), rapid.Int64(), rapid.Int64Range(0, 1000))
}

func clampCeiling(x int64) int64 { return min(max(x, 0), sluice.CounterCeiling) }

// ceilingOf is a true total as a counter holds it: saturated.
func ceilingOf(x *big.Int) int64 {
	if x.Cmp(big.NewInt(sluice.CounterCeiling)) > 0 {
		return sluice.CounterCeiling
	}
	return x.Int64()
}

// subjects makes every property case's counters its own on one store.
var subjects atomic.Int64

// refusedByStore reports an admission the store refused to evaluate,
// which a store may do for figures it cannot hold exactly (redisstore's
// ErrPrecision): never an admission.
func refusedByStore(err error) bool { return errors.Is(err, sluice.ErrStoreUnavailable) }

var propertyScenarios = map[string]func(t *testing.T, h *Harness){
	// Admit and Settle given straight to the store, with any int64 amount,
	// actual and limit: the budget counter is never negative, never past
	// the ceiling, always the saturated sum of what was charged (amounts
	// taken within [0, ceiling]), and nothing is admitted past its limit.
	"PropertyBudgetSaturatesWithAnyInt64": func(t *testing.T, h *Harness) {
		deadline := time.Now().Add(propertyBudget)
		start, end := sluice.PeriodBounds(sluice.PeriodDay, h.Clock.Now(), time.UTC)
		var ids atomic.Uint64
		ids.Store(uint64(time.Now().UnixNano()) >> 2)
		rapid.Check(t, func(rt *rapid.T) {
			if time.Now().After(deadline) {
				return
			}
			key := sluice.CounterKey{Rule: 0x5a7, Subject: fmt.Sprintf("prop-%d", subjects.Add(1)), Period: start.Unix()}
			charge := func(amount, limit int64) *sluice.Batch {
				return &sluice.Batch{ID: ids.Add(1), Deadline: h.Clock.Now().Add(time.Minute), Charges: []sluice.Charge{{
					Key: key, Kind: sluice.KindBudget, Limit: limit, PeriodEnd: end, Amount: amount}}}
			}
			settled, reserved := new(big.Int), new(big.Int) // the true totals, amounts clamped
			var open []*sluice.Batch
			for range rapid.IntRange(1, 25).Draw(rt, "steps") {
				if len(open) > 0 && rapid.Bool().Draw(rt, "settle") {
					i := rapid.IntRange(0, len(open)-1).Draw(rt, "which")
					b := open[i]
					open = append(open[:i], open[i+1:]...)
					b.Charges[0].Actual = anyInt64().Draw(rt, "actual")
					if err := h.Store.Settle(h.Ctx, h.Clock.Now(), *b); err != nil {
						rt.Fatalf("settle %+v: %v", b.Charges[0], err)
					}
					reserved.Sub(reserved, big.NewInt(clampCeiling(b.Charges[0].Amount)))
					settled.Add(settled, big.NewInt(clampCeiling(b.Charges[0].Actual)))
				} else {
					amount, limit := anyInt64().Draw(rt, "amount"), anyInt64().Draw(rt, "limit")
					b := charge(amount, limit)
					ok, err := h.Store.Admit(h.Ctx, h.Clock.Now(), *b, make([]sluice.ChargeResult, 1))
					if err != nil {
						continue // a store may refuse figures it cannot hold exactly
					}
					inUse := new(big.Int).Add(settled, reserved)
					held, a, l := ceilingOf(inUse), clampCeiling(amount), clampCeiling(limit)
					want := held+a <= l && (a > 0 || held < l)
					if ok != want {
						rt.Fatalf("admit %d against %d holding %s: admitted %v, want %v", amount, limit, inUse, ok, want)
					}
					if ok {
						if inUse.Add(inUse, big.NewInt(a)).Cmp(big.NewInt(limit)) > 0 {
							rt.Fatalf("admitted %d against %d past the limit: %s in use", amount, limit, inUse)
						}
						open = append(open, b)
						reserved.Add(reserved, big.NewInt(a))
					}
				}
				peek := make([]sluice.ChargeResult, 1)
				if err := h.Store.Peek(h.Ctx, h.Clock.Now(), *charge(0, 1), peek); err != nil {
					rt.Fatalf("peek: %v", err)
				}
				want := ceilingOf(new(big.Int).Add(settled, reserved))
				if got := peek[0].Used; got != want {
					rt.Fatalf("counter holds %d, want %d (settled %s, reserved %s)", got, want, settled, reserved)
				}
			}
			for _, b := range open {
				b.Charges[0].Actual = 0
				if err := h.Store.Settle(h.Ctx, h.Clock.Now(), *b); err != nil {
					rt.Fatalf("release: %v", err)
				}
			}
		})
	},
	// The same through a Limiter, with any int64 estimates, usage and
	// limits for a token and a cost budget: every admission is the one the
	// rules allow, none past a limit, and the counters hold what was
	// charged (impossible usage charged as reserved).
	"PropertyLimiterBudgetsWithAnyInt64": func(t *testing.T, h *Harness) {
		deadline := time.Now().Add(propertyBudget)
		rapid.Check(t, func(rt *rapid.T) {
			if time.Now().After(deadline) {
				return
			}
			limits := [2]int64{anyInt64().Draw(rt, "token limit"), anyInt64().Draw(rt, "cost limit")}
			rules := []sluice.Rule{
				{Name: "tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: limits[0], Period: sluice.PeriodDay},
				{Name: "cost", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricCost, Limit: limits[1], Period: sluice.PeriodDay},
			}
			l, err := sluice.New(sluice.Options{Store: h.Store, Clock: h.Clock, Rules: rules, DefaultTimeout: time.Minute})
			if limits[0] < 0 || limits[1] < 0 {
				if err == nil {
					rt.Fatalf("a negative limit %v was accepted", limits)
				}
				return
			}
			if err != nil {
				rt.Fatal(err)
			}
			id := sluice.Identity{Workspace: fmt.Sprintf("prop-%d", subjects.Add(1))}
			type held struct {
				r      *sluice.Reservation
				amount [2]int64
			}
			var open []held
			settled, reserved := [2]*big.Int{new(big.Int), new(big.Int)}, [2]*big.Int{new(big.Int), new(big.Int)}
			for range rapid.IntRange(1, 20).Draw(rt, "steps") {
				if len(open) > 0 && rapid.Bool().Draw(rt, "settle") {
					i := rapid.IntRange(0, len(open)-1).Draw(rt, "which")
					o := open[i]
					open = append(open[:i], open[i+1:]...)
					u := sluice.Usage{InputTokens: anyInt64().Draw(rt, "input"), OutputTokens: anyInt64().Draw(rt, "output"), Cost: anyInt64().Draw(rt, "cost")}
					err := o.r.Settle(h.Ctx, u)
					actual := [2]int64{u.InputTokens + u.OutputTokens, u.Cost}
					if valid(u) {
						if err != nil {
							rt.Fatalf("settle %+v: %v", u, err)
						}
						if u.IsZero() {
							// Nothing reported: charged as reserved.
							actual = o.amount
						}
					} else {
						if !errors.Is(err, sluice.ErrInvalidUsage) {
							rt.Fatalf("settle %+v: %v, want ErrInvalidUsage", u, err)
						}
						actual = o.amount
					}
					for k := range 2 {
						reserved[k].Sub(reserved[k], big.NewInt(o.amount[k]))
						settled[k].Add(settled[k], big.NewInt(actual[k]))
					}
				} else {
					max := sluice.Usage{InputTokens: anyInt64().Draw(rt, "max input"), OutputTokens: anyInt64().Draw(rt, "max output"), Cost: anyInt64().Draw(rt, "max cost")}
					r, err := l.Admit(h.Ctx, sluice.Request{Identity: id, Max: max})
					amount := [2]int64{max.InputTokens + max.OutputTokens, max.Cost}
					var want error
					fits := true
					switch {
					case !valid(max):
						want = sluice.ErrInvalidUsage
					case limits[0] > 0 && amount[0] > limits[0] || limits[1] > 0 && amount[1] > limits[1]:
						want = sluice.ErrTooLarge
					default:
						for k := range 2 {
							if limits[k] == 0 { // a disabled rule
								continue
							}
							held := ceilingOf(new(big.Int).Add(settled[k], reserved[k]))
							a, lim := amount[k], clampCeiling(limits[k])
							fits = fits && held+a <= lim && (a > 0 || held < lim)
						}
						if !fits {
							want = sluice.ErrBudgetExhausted
						}
					}
					if err != nil && refusedByStore(err) && want == nil {
						continue
					}
					if want == nil && err != nil || want != nil && !errors.Is(err, want) {
						rt.Fatalf("admit %+v under limits %v: %v, want %v", max, limits, err, want)
					}
					if err != nil {
						continue
					}
					for k := range 2 {
						if limits[k] == 0 {
							amount[k] = 0
							continue
						}
						inUse := new(big.Int).Add(settled[k], reserved[k])
						if inUse.Add(inUse, big.NewInt(amount[k])).Cmp(big.NewInt(limits[k])) > 0 {
							rt.Fatalf("%s admitted past its limit %d: %s", rules[k].Name, limits[k], inUse)
						}
						reserved[k].Add(reserved[k], big.NewInt(amount[k]))
					}
					open = append(open, held{r: r, amount: amount})
				}
				eff, err := l.Effective(h.Ctx, id)
				if err != nil {
					if refusedByStore(err) {
						continue
					}
					rt.Fatalf("effective: %v", err)
				}
				for _, e := range eff {
					k := 0
					if e.Rule == "cost" {
						k = 1
					}
					want := ceilingOf(new(big.Int).Add(settled[k], reserved[k]))
					if e.Used != want || e.Used < 0 {
						rt.Fatalf("%s holds %d, want %d", e.Rule, e.Used, want)
					}
				}
			}
			for _, o := range open {
				if err := o.r.Release(h.Ctx); err != nil {
					rt.Fatalf("release: %v", err)
				}
			}
		})
	},
}

// valid reports whether u is usage a call could produce, as the Limiter
// believes it.
func valid(u sluice.Usage) bool {
	for _, v := range []int64{u.InputTokens, u.OutputTokens, u.CachedInputTokens, u.CacheWriteTokens} {
		if v < 0 || v > sluice.MaxTokens {
			return false
		}
	}
	return u.Cost >= 0 && u.Cost <= sluice.MaxCost
}
