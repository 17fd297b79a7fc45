package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// tenancyScenarios: tenants that use the same names share nothing, in
// every store.
var tenancyScenarios = map[string]func(t *testing.T, h *Harness){
	// Two orgs with identical workspace, team and user names: each spends
	// its own rate, budget and concurrency; an org's own rule refuses only
	// in that org; a global rule counts both.
	"Tenancy/TwoOrgsWithTheSameNamesShareNothing": func(t *testing.T, h *Harness) {
		perUser := sluice.Rule{Name: "per_user", Kind: sluice.KindRate, Subject: "workspace+user", Limit: 2, Window: time.Minute}
		perTeam := sluice.Rule{Name: "per_team", Kind: sluice.KindConcurrency, Subject: "team", Limit: 3}
		daily := sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
			Limit: 1000, Period: sluice.PeriodDay}
		orgOnly := sluice.Rule{Name: "org_a_only", Kind: sluice.KindRate, Subject: "user", Limit: 1, Window: time.Minute, Org: "orgA"}
		global := sluice.Rule{Name: "everyone", Kind: sluice.KindBudget, Subject: "global", Limit: 5, Period: sluice.PeriodDay}
		l := h.Limiter(perUser, perTeam, daily, orgOnly, global)
		in := func(org string, input int64) sluice.Request {
			return sluice.Request{Identity: sluice.Identity{Org: org, Workspace: "shared", Team: "t", User: "dup", Key: "key-" + org},
				Max: sluice.Usage{InputTokens: input}}
		}
		// orgA's own rule lets its user through once.
		a := h.Admit(l, in("orgA", 600))
		h.Refuse(l, in("orgA", 1), sluice.ErrRateLimited)
		// orgB: its own user and workspace counters, and no org_a_only.
		b1 := h.Admit(l, in("orgB", 400))
		b2 := h.Admit(l, in("orgB", 500))
		if used, _ := h.Used(l, in("orgA", 0).Identity, "daily"); used != 600 {
			t.Fatalf("orgA's daily budget used %d, want its own 600", used)
		}
		if used, _ := h.Used(l, in("orgB", 0).Identity, "daily"); used != 900 {
			t.Fatalf("orgB's daily budget used %d, want its own 900", used)
		}
		if used, _ := h.Used(l, in("orgB", 0).Identity, "per_team"); used != 2 {
			t.Fatalf("orgB's team has %d in flight, want its own 2", used)
		}
		h.Refuse(l, in("orgB", 1), sluice.ErrRateLimited)
		for _, r := range []*sluice.Reservation{a, b1, b2} {
			h.Settle(r, sluice.Usage{InputTokens: 1})
		}
		// The global budget counted all three: two more fit, in any org.
		h.Clock.Advance(time.Minute)
		h.Admit(l, in("orgC", 1))
		h.Admit(l, in("orgC", 1))
		h.Refuse(l, in("orgA", 1), sluice.ErrBudgetExhausted)
	},
}

// PreviousVersion is how the testdata stores of the version before
// counters were qualified by their org were written: at PreviousVersionAt,
// under these rules, two calls of 300 and 400 input tokens by one key of
// the default org, settled at their reservations.
var (
	PreviousVersionAt    = Start
	PreviousVersionRules = []sluice.Rule{
		{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodDay},
		{Name: "per_user", Kind: sluice.KindRate, Subject: "workspace+user", Limit: 5, Window: time.Hour},
		{Name: "per_org", Kind: sluice.KindBudget, Subject: "org", Limit: 100, Period: sluice.PeriodMonth},
	}
)

// CheckPreviousVersion checks that h's store, written by the previous
// version (see PreviousVersion), still counts what it counted: upgrading
// resets no budget in progress in the default org. withRates is false for
// a store that does not keep rate buckets (sqlitestore).
func CheckPreviousVersion(t *testing.T, h *Harness, withRates bool) {
	t.Helper()
	h.Clock.Set(PreviousVersionAt)
	l := h.Limiter(PreviousVersionRules...)
	id := sluice.Identity{Org: sluice.DefaultOrg, Workspace: "ws", User: "u", Key: "k"}
	want := map[string]int64{"daily": 700, "per_org": 2}
	if withRates {
		want["per_user"] = 2
	}
	for rule, used := range want {
		if got, _ := h.Used(l, id, rule); got != used {
			t.Errorf("%s: used %d after the upgrade, want the %d the previous version counted", rule, got, used)
		}
	}
	// And the budget goes on from there: 300 more fit, 301 do not.
	h.Refuse(l, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 301}}, sluice.ErrBudgetExhausted)
	h.Settle(h.Admit(l, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 300}}), sluice.Usage{InputTokens: 300})
}
