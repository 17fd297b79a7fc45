package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func rpm(limit int64) sluice.Rule {
	return sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: limit, Window: time.Minute}
}

func tpm(limit int64) sluice.Rule {
	return sluice.Rule{Name: "tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: limit, Window: time.Minute}
}

var rateScenarios = map[string]func(t *testing.T, h *Harness){
	"RateExactUnderConcurrency": func(t *testing.T, h *Harness) {
		l := h.Limiter(rpm(100))
		got := h.Hammer(l, Key("k"), 64, 4)
		if len(got) != 100 {
			t.Fatalf("admitted %d of 256 at a limit of 100, want exactly 100", len(got))
		}
	},
	"RateBurstThenSustain": func(t *testing.T, h *Harness) {
		r := rpm(60)
		r.Burst = 10
		l := h.Limiter(r)
		for i := range 10 {
			if _, err := l.Admit(h.Ctx, Key("k")); err != nil {
				t.Fatalf("burst admission %d: %v", i, err)
			}
		}
		h.Refuse(l, Key("k"), sluice.ErrRateLimited)
		h.Clock.Advance(time.Second)
		h.Admit(l, Key("k"))
		h.Refuse(l, Key("k"), sluice.ErrRateLimited)
	},
	"RateRetryAfterExactAndRoundedUp": func(t *testing.T, h *Harness) {
		l := h.Limiter(sluice.Rule{Name: "rps", Kind: sluice.KindRate, Subject: "key", Limit: 3, Window: time.Second})
		for range 3 {
			h.Admit(l, Key("k"))
		}
		err := h.Refuse(l, Key("k"), sluice.ErrRateLimited)
		var rl *sluice.RateLimitError
		if !errors.As(err, &rl) || rl.RetryAfter != 334*time.Millisecond || rl.Rule != "rps" {
			t.Fatalf("refusal %#v, want rule rps retry after 334ms (333.33ms rounded up)", err)
		}
		h.Clock.Advance(333 * time.Millisecond)
		err = h.Refuse(l, Key("k"), sluice.ErrRateLimited)
		if errors.As(err, &rl); rl.RetryAfter != time.Millisecond {
			t.Fatalf("after 333ms retry after %v, want 1ms", rl.RetryAfter)
		}
		h.Clock.Advance(time.Millisecond)
		h.Admit(l, Key("k"))
	},
	"RateSubjectsAreIndependent": func(t *testing.T, h *Harness) {
		l := h.Limiter(rpm(1))
		h.Admit(l, Key("a"))
		h.Admit(l, Key("b"))
		h.Refuse(l, Key("a"), sluice.ErrRateLimited)
	},
	"RateRefundAfterSettle": func(t *testing.T, h *Harness) {
		l := h.Limiter(tpm(1000))
		r := h.Admit(l, Tokens("k", 100, 500))
		if _, rem := h.Used(l, Key("k").Identity, "tpm"); rem != 400 {
			t.Fatalf("remaining after reserving 600: %d, want 400", rem)
		}
		h.Settle(r, sluice.Usage{InputTokens: 100, OutputTokens: 50})
		if _, rem := h.Used(l, Key("k").Identity, "tpm"); rem != 850 {
			t.Fatalf("remaining after settling 150: %d, want 850", rem)
		}
	},
	"RateDebtAfterOverrunIsBounded": func(t *testing.T, h *Harness) {
		l := h.Limiter(tpm(1000))
		r := h.Admit(l, Tokens("k", 10, 90))
		h.Settle(r, sluice.Usage{InputTokens: 10, OutputTokens: 100_000})
		if got := l.Stats().Overruns; got != 1 {
			t.Fatalf("overruns %d, want 1", got)
		}
		// Debt is capped at one burst: a full minute refills it to zero,
		// a second minute to full.
		h.Clock.Advance(time.Minute)
		err := h.Refuse(l, Tokens("k", 1, 0), sluice.ErrRateLimited)
		var rl *sluice.RateLimitError
		if errors.As(err, &rl); rl.RetryAfter != 60*time.Millisecond {
			t.Fatalf("retry after %v at zero level, want 60ms for one token", rl.RetryAfter)
		}
		h.Clock.Advance(time.Minute)
		if _, rem := h.Used(l, Key("k").Identity, "tpm"); rem != 1000 {
			t.Fatalf("remaining after two minutes: %d, want 1000", rem)
		}
	},
	"RateNeverFits": func(t *testing.T, h *Harness) {
		l := h.Limiter(tpm(1000))
		err := h.Refuse(l, Tokens("k", 500, 1000), sluice.ErrTooLarge)
		var tl *sluice.TooLargeError
		if !errors.As(err, &tl) || tl.Estimate != 1500 || tl.Limit != 1000 || tl.Rule != "tpm" {
			t.Fatalf("got %#v, want too large 1500 > 1000 on tpm", err)
		}
		if used, _ := h.Used(l, Key("k").Identity, "tpm"); used != 0 {
			t.Fatalf("too large request charged %d", used)
		}
	},
	"RateChangedWindowResetsCounter": func(t *testing.T, h *Harness) {
		l := h.Limiter(rpm(2))
		h.Admit(l, Key("k"))
		h.Admit(l, Key("k"))
		h.Refuse(l, Key("k"), sluice.ErrRateLimited)
		r := rpm(2)
		r.Window = 2 * time.Minute
		if err := l.SetPolicy(sluice.Policy{Rules: []sluice.Rule{r}}); err != nil {
			t.Fatal(err)
		}
		h.Admit(l, Key("k"))
	},
	"RateDisabledCountsNothing": func(t *testing.T, h *Harness) {
		r := rpm(3)
		r.Disabled = true
		l := h.Limiter(r)
		for range 10 {
			h.Admit(l, Key("k"))
		}
		r.Disabled = false
		if err := l.SetPolicy(sluice.Policy{Rules: []sluice.Rule{r}}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			h.Admit(l, Key("k"))
		}
		h.Refuse(l, Key("k"), sluice.ErrRateLimited)
	},
	"RateShadowCountsButNeverRefuses": func(t *testing.T, h *Harness) {
		r := rpm(2)
		r.Mode = sluice.ModeShadow
		l := h.Limiter(r)
		var shadowed int
		for range 5 {
			res := h.Admit(l, Key("k")).Result()
			shadowed += len(res.Shadowed)
		}
		if shadowed != 3 {
			t.Fatalf("shadow refusals reported %d, want 3", shadowed)
		}
		if _, rem := h.Used(l, Key("k").Identity, "rpm"); rem != 0 {
			t.Fatalf("shadow rule remaining %d, want 0 (it counts)", rem)
		}
	},
	"RateReleaseRefunds": func(t *testing.T, h *Harness) {
		l := h.Limiter(rpm(1))
		r := h.Admit(l, Key("k"))
		if err := r.Release(h.Ctx); err != nil {
			t.Fatal(err)
		}
		h.Admit(l, Key("k"))
	},
}
