package storetest

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func dailyTokens(limit int64) sluice.Rule {
	return sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
		Limit: limit, Period: sluice.PeriodDay}
}

func budgetUsed(h *Harness, l *sluice.Limiter, rule string) int64 {
	used, _ := h.Used(l, Key("k").Identity, rule)
	return used
}

// rollover exhausts a budget of period p in zone tz at the local time at,
// and checks that it refuses until exactly wantReset and admits from then.
func rollover(t *testing.T, h *Harness, p sluice.Period, tz string, at, wantReset time.Time) {
	h.Clock.Set(at)
	l := h.Limiter(sluice.Rule{Name: "b", Kind: sluice.KindBudget, Subject: "workspace", Limit: 2, Period: p, TimeZone: tz})
	h.Admit(l, Key("k"))
	h.Admit(l, Key("k"))
	err := h.Refuse(l, Key("k"), sluice.ErrBudgetExhausted)
	var be *sluice.BudgetError
	if !errors.As(err, &be) || !be.ResetAt.Equal(wantReset) || be.Used != 2 || be.Limit != 2 {
		t.Fatalf("refusal %#v, want reset at %v", err, wantReset)
	}
	h.Clock.Set(wantReset.Add(-time.Nanosecond))
	h.Refuse(l, Key("k"), sluice.ErrBudgetExhausted)
	h.Clock.Set(wantReset)
	h.Admit(l, Key("k"))
}

var budgetScenarios = map[string]func(t *testing.T, h *Harness){
	"BudgetWorstCaseNeverExceededUnderConcurrency": func(t *testing.T, h *Harness) {
		l := h.Limiter(dailyTokens(1000))
		got := h.Hammer(l, Tokens("k", 10, 20), 64, 2)
		if len(got) != 33 {
			t.Fatalf("admitted %d requests of 30 tokens into 1000, want exactly 33", len(got))
		}
		var wg sync.WaitGroup
		for _, r := range got {
			wg.Go(func() { _ = r.Settle(h.Ctx, sluice.Usage{InputTokens: 10, OutputTokens: 20}) })
		}
		wg.Wait()
		if used := budgetUsed(h, l, "daily"); used != 990 {
			t.Fatalf("used %d after settling 33 x 30, want 990", used)
		}
	},
	"BudgetAllOrNothingAcrossThreeRules": func(t *testing.T, h *Harness) {
		l := h.Limiter(rpm(10), tpm(10_000), dailyTokens(1000))
		h.Settle(h.Admit(l, Tokens("k", 400, 500)), sluice.Usage{InputTokens: 400, OutputTokens: 500})
		h.Clock.Advance(time.Minute) // both buckets full again
		h.Refuse(l, Tokens("k", 100, 100), sluice.ErrBudgetExhausted)
		id := Key("k").Identity
		if used, _ := h.Used(l, id, "rpm"); used != 0 {
			t.Fatalf("rpm charged %d by a refused admission", used)
		}
		if used, _ := h.Used(l, id, "tpm"); used != 0 {
			t.Fatalf("tpm charged %d by a refused admission", used)
		}
		if used := budgetUsed(h, l, "daily"); used != 900 {
			t.Fatalf("budget used %d, want 900", used)
		}
	},
	"BudgetRefundAndOverrun": func(t *testing.T, h *Harness) {
		l := h.Limiter(dailyTokens(1000))
		r := h.Admit(l, Tokens("k", 100, 200))
		if used := budgetUsed(h, l, "daily"); used != 300 {
			t.Fatalf("reserved %d, want 300", used)
		}
		h.Settle(r, sluice.Usage{InputTokens: 100, OutputTokens: 20})
		if used := budgetUsed(h, l, "daily"); used != 120 {
			t.Fatalf("used %d after refund, want 120", used)
		}
		r = h.Admit(l, Tokens("k", 100, 200))
		h.Settle(r, sluice.Usage{InputTokens: 100, OutputTokens: 900})
		if used := budgetUsed(h, l, "daily"); used != 1120 {
			t.Fatalf("used %d after an overrun, want 1120 (never capped)", used)
		}
		if l.Stats().Overruns != 1 {
			t.Fatalf("overruns %d, want 1", l.Stats().Overruns)
		}
		h.Refuse(l, Tokens("k", 1, 0), sluice.ErrBudgetExhausted)
	},
	"BudgetSettleTwiceChargesOnce": func(t *testing.T, h *Harness) {
		l := h.Limiter(dailyTokens(1000))
		r := h.Admit(l, Tokens("k", 100, 200))
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { _ = r.Settle(h.Ctx, sluice.Usage{InputTokens: 100, OutputTokens: 50}) })
		}
		wg.Wait()
		h.Settle(r, sluice.Usage{InputTokens: 100, OutputTokens: 50})
		if used := budgetUsed(h, l, "daily"); used != 150 {
			t.Fatalf("used %d after settling 9 times, want 150", used)
		}
	},
	"BudgetNoUsageChargesEstimate": func(t *testing.T, h *Harness) {
		l := h.Limiter(dailyTokens(1000))
		h.Settle(h.Admit(l, Tokens("k", 100, 200)), sluice.Usage{})
		if used := budgetUsed(h, l, "daily"); used != 300 {
			t.Fatalf("used %d, want the 300 reserved", used)
		}
	},
	"BudgetImpossibleUsageChargesReservation": func(t *testing.T, h *Harness) {
		l := h.Limiter(dailyTokens(1000))
		for i, u := range []sluice.Usage{{InputTokens: 100, OutputTokens: -5}, {OutputTokens: math.MaxInt64}} {
			r := h.Admit(l, Tokens("k", 100, 200))
			if err := r.Settle(h.Ctx, u); !errors.Is(err, sluice.ErrInvalidUsage) {
				t.Fatalf("settle with %+v: %v, want ErrInvalidUsage", u, err)
			}
			if used := budgetUsed(h, l, "daily"); used != 300*int64(i+1) {
				t.Fatalf("used %d after settling %+v, want the reservations' %d", used, u, 300*(i+1))
			}
		}
	},
	"BudgetNeverFits": func(t *testing.T, h *Harness) {
		l := h.Limiter(dailyTokens(1000))
		err := h.Refuse(l, Tokens("k", 500, 600), sluice.ErrTooLarge)
		var tl *sluice.TooLargeError
		if !errors.As(err, &tl) || tl.Estimate != 1100 || tl.Limit != 1000 {
			t.Fatalf("got %#v", err)
		}
	},
	"BudgetSweepCharges": func(t *testing.T, h *Harness) {
		charge, release := dailyTokens(1000), dailyTokens(1000)
		release.Name, release.OnExpiry = "daily_release", sluice.ExpiryRelease
		l := h.Limiter(charge, release)
		r := h.Admit(l, Tokens("k", 100, 200))
		h.Clock.Advance(89 * time.Second)
		if res, err := l.Sweep(h.Ctx); err != nil || res.Reservations != 0 {
			t.Fatalf("sweep before the deadline: %+v %v", res, err)
		}
		h.Clock.Advance(time.Second) // deadline: one minute timeout + 30s slack
		res, err := l.Sweep(h.Ctx)
		if err != nil || res.Reservations != 1 || res.Charged != 1 || res.Released != 1 {
			t.Fatalf("sweep: %+v %v, want one reservation, one charged, one released", res, err)
		}
		if used := budgetUsed(h, l, "daily"); used != 300 {
			t.Fatalf("charge policy: used %d, want 300", used)
		}
		if used := budgetUsed(h, l, "daily_release"); used != 0 {
			t.Fatalf("release policy: used %d, want 0", used)
		}
		// A late settle finds the sweep has been there: charged once.
		h.Settle(r, sluice.Usage{InputTokens: 1, OutputTokens: 1})
		if used := budgetUsed(h, l, "daily"); used != 300 {
			t.Fatalf("late settle changed used to %d", used)
		}
		if res, _ := l.Sweep(h.Ctx); res.Reservations != 0 {
			t.Fatalf("second sweep settled %d again", res.Reservations)
		}
	},
	"BudgetDayRolloverUTC": func(t *testing.T, h *Harness) {
		rollover(t, h, sluice.PeriodDay, "", time.Date(2026, 3, 4, 23, 59, 59, 0, time.UTC), time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC))
	},
	"BudgetWeekRolloverFromMonday": func(t *testing.T, h *Harness) {
		rollover(t, h, sluice.PeriodWeek, "", time.Date(2026, 3, 8, 22, 0, 0, 0, time.UTC), time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC))
	},
	"BudgetMonthRollover": func(t *testing.T, h *Harness) {
		rollover(t, h, sluice.PeriodMonth, "", time.Date(2026, 12, 31, 12, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	},
	"BudgetDayAcrossSpringDSTIs23Hours": func(t *testing.T, h *Harness) {
		ny, _ := time.LoadLocation("America/New_York")
		reset := time.Date(2026, 3, 9, 0, 0, 0, 0, ny)
		if got := reset.Sub(time.Date(2026, 3, 8, 0, 0, 0, 0, ny)); got != 23*time.Hour {
			t.Fatalf("test data: day is %v", got)
		}
		rollover(t, h, sluice.PeriodDay, "America/New_York", time.Date(2026, 3, 8, 0, 30, 0, 0, ny), reset)
	},
	"BudgetDayAcrossAutumnDSTIs25Hours": func(t *testing.T, h *Harness) {
		ny, _ := time.LoadLocation("America/New_York")
		reset := time.Date(2026, 11, 2, 0, 0, 0, 0, ny)
		if got := reset.Sub(time.Date(2026, 11, 1, 0, 0, 0, 0, ny)); got != 25*time.Hour {
			t.Fatalf("test data: day is %v", got)
		}
		rollover(t, h, sluice.PeriodDay, "America/New_York", time.Date(2026, 11, 1, 23, 0, 0, 0, ny), reset)
	},
	"BudgetWarnings": func(t *testing.T, h *Harness) {
		r := dailyTokens(100)
		r.WarnAt = []float64{0.5, 0.9}
		r.SoftLimit = 80
		l := h.Limiter(r)
		want := map[int]string{5: "0.5", 8: "0.5 soft", 9: "0.9 soft"}
		for i := 1; i <= 10; i++ {
			res := h.Admit(l, Tokens("k", 10, 0)).Result()
			got := ""
			for _, w := range res.Warnings {
				got = formatWarning(w)
			}
			if exp, ok := want[i]; ok && got != exp {
				t.Fatalf("admission %d: warning %q, want %q", i, got, exp)
			}
			if i < 5 && got != "" {
				t.Fatalf("admission %d: early warning %q", i, got)
			}
		}
	},
	"BudgetWinsOverRate": func(t *testing.T, h *Harness) {
		l := h.Limiter(rpm(1), dailyTokens(100))
		h.Admit(l, Tokens("k", 100, 0))
		h.Refuse(l, Tokens("k", 1, 0), sluice.ErrBudgetExhausted)
	},
	// A batch is passed by value and stays the caller's: a store keeps a
	// copy of what its sweep needs, so that a caller reusing the batch's
	// charges after Admit changes nothing the store holds.
	"StoreKeepsNoPartOfTheCallersBatch": func(t *testing.T, h *Harness) {
		now := h.Clock.Now()
		start, end := sluice.PeriodBounds(sluice.PeriodDay, now, time.UTC)
		charge := func(subject string) sluice.Charge {
			return sluice.Charge{Key: sluice.CounterKey{Rule: 0xc0b1e5, Subject: subject, Period: start.Unix()},
				Kind: sluice.KindBudget, Limit: 100, PeriodEnd: end, Amount: 40}
		}
		b := sluice.Batch{ID: 1, Deadline: now.Add(time.Minute), Charges: []sluice.Charge{charge("kept")}}
		results := make([]sluice.ChargeResult, 1)
		if ok, err := h.Store.Admit(h.Ctx, now, b, results); err != nil || !ok || !results[0].Allowed {
			t.Fatalf("admit: %v %v %+v", ok, err, results[0])
		}
		// The caller reuses its charges for another batch.
		b.Charges[0] = charge("reused")
		b.Charges[0].Amount = 99
		h.Clock.Advance(2 * time.Minute)
		if res, err := h.Store.Sweep(h.Ctx, h.Clock.Now()); err != nil || res.Reservations != 1 || res.Charged != 1 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
		for subject, want := range map[string]int64{"kept": 40, "reused": 0} {
			peek := charge(subject)
			peek.Amount = 0
			if err := h.Store.Peek(h.Ctx, h.Clock.Now(), sluice.Batch{ID: 2, Charges: []sluice.Charge{peek}}, results); err != nil {
				t.Fatal(err)
			}
			if results[0].Used != want {
				t.Errorf("%s: used %d after the sweep, want %d", subject, results[0].Used, want)
			}
		}
	},
}

func formatWarning(w sluice.Warning) string {
	var parts []string
	if w.Threshold > 0 {
		parts = append(parts, strconv.FormatFloat(w.Threshold, 'g', -1, 64))
	}
	if w.Soft {
		parts = append(parts, "soft")
	}
	return strings.Join(parts, " ")
}
