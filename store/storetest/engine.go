package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var engineScenarios = map[string]func(t *testing.T, h *Harness){
	"CompositeSubjectCountsPerUserInWorkspace": func(t *testing.T, h *Harness) {
		l := h.Limiter(sluice.Rule{Name: "wu", Kind: sluice.KindRate, Subject: "workspace+user", Limit: 1, Window: time.Minute})
		req := func(ws, user string) sluice.Request {
			return sluice.Request{Identity: sluice.Identity{Workspace: ws, User: user}}
		}
		h.Admit(l, req("w1", "alice"))
		h.Admit(l, req("w1", "bob"))
		h.Admit(l, req("w2", "alice"))
		h.Refuse(l, req("w1", "alice"), sluice.ErrRateLimited)
	},
	"GlobalSubjectIsShared": func(t *testing.T, h *Harness) {
		l := h.Limiter(sluice.Rule{Name: "all", Kind: sluice.KindRate, Subject: "global", Limit: 2, Window: time.Minute})
		h.Admit(l, Key("a"))
		h.Admit(l, Key("b"))
		h.Refuse(l, Key("c"), sluice.ErrRateLimited)
	},
	"TagsChargeEachTag": func(t *testing.T, h *Harness) {
		l := h.Limiter(sluice.Rule{Name: "tag", Kind: sluice.KindRate, Subject: "tag", Limit: 1, Window: time.Minute})
		tagged := func(tags ...string) sluice.Request {
			return sluice.Request{Identity: sluice.Identity{Key: "k", Tags: tags}}
		}
		h.Admit(l, tagged("a", "b", "a"))
		h.Refuse(l, tagged("b"), sluice.ErrRateLimited)
		h.Admit(l, tagged("c"))
	},
	"MatchNarrowsRule": func(t *testing.T, h *Harness) {
		r := rpm(1)
		r.Match.Models = []string{"big"}
		l := h.Limiter(r)
		big, small := Key("k"), Key("k")
		big.Identity.Model, small.Identity.Model = "big", "small"
		h.Admit(l, big)
		h.Refuse(l, big, sluice.ErrRateLimited)
		h.Admit(l, small)
		h.Admit(l, small)
	},
	"ResultNamesRuleWithLeastRoom": func(t *testing.T, h *Harness) {
		l := h.Limiter(rpm(10), tpm(1000))
		res := h.Admit(l, Tokens("k", 250, 250)).Result()
		if res.Rule != "tpm" || res.Limit != 1000 || res.Remaining != 500 {
			t.Fatalf("result %+v, want tpm with 500 of 1000 left", res)
		}
		if !res.ResetAt.Equal(Start.Add(30 * time.Second)) {
			t.Fatalf("reset at %v, want full in 30s", res.ResetAt)
		}
	},
	"LongestWaitAmongRates": func(t *testing.T, h *Harness) {
		slow := sluice.Rule{Name: "slow", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Hour}
		l := h.Limiter(rpm(1), slow)
		h.Admit(l, Key("k"))
		err := h.Refuse(l, Key("k"), sluice.ErrRateLimited)
		var rl *sluice.RateLimitError
		if !errors.As(err, &rl) || rl.Rule != "slow" || rl.RetryAfter != time.Hour {
			t.Fatalf("got %#v, want slow with an hour to wait", err)
		}
	},
	"CancelledContextChargesNothing": func(t *testing.T, h *Harness) {
		l := h.Limiter(rpm(1))
		ctx, cancel := context.WithCancel(h.Ctx)
		cancel()
		if _, err := l.Admit(ctx, Key("k")); !errors.Is(err, context.Canceled) {
			t.Fatalf("admit with a cancelled context: %v", err)
		}
		h.Admit(l, Key("k"))
	},
	"SweepFreesLeasesAndChargesBudget": func(t *testing.T, h *Harness) {
		l := h.Limiter(inFlight(1), dailyTokens(1000))
		h.Admit(l, Tokens("k", 100, 0))
		h.Clock.Advance(2 * time.Minute)
		if res, err := l.Sweep(h.Ctx); err != nil || res.Reservations != 1 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
		h.Admit(l, Tokens("k", 100, 0))
		if used := budgetUsed(h, l, "daily"); used != 200 {
			t.Fatalf("used %d, want 200", used)
		}
	},
	"EstimateAndFixedReservations": func(t *testing.T, h *Harness) {
		est, fixed := dailyTokens(1000), dailyTokens(1000)
		est.Name, est.Reserve = "est", sluice.ReserveEstimate
		fixed.Name, fixed.Reserve, fixed.ReserveAmount = "fixed", sluice.ReserveFixed, 50
		l := h.Limiter(est, fixed)
		req := Tokens("k", 100, 400)
		req.Expected = sluice.Usage{InputTokens: 100, OutputTokens: 100}
		r := h.Admit(l, req)
		if used := budgetUsed(h, l, "est"); used != 200 {
			t.Fatalf("estimate reserved %d, want 200", used)
		}
		if used := budgetUsed(h, l, "fixed"); used != 50 {
			t.Fatalf("fixed reserved %d, want 50", used)
		}
		h.Settle(r, sluice.Usage{InputTokens: 100, OutputTokens: 300})
		if a, b := budgetUsed(h, l, "est"), budgetUsed(h, l, "fixed"); a != 400 || b != 400 {
			t.Fatalf("after settle used %d and %d, want 400 each", a, b)
		}
	},
}
