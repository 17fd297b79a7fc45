package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"pgregory.net/rapid"
)

// hitRules are a rule of each kind a cache hit meets, with each
// cache_hits setting.
func hitRules() []sluice.Rule {
	return []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 100, Window: time.Minute},
		{Name: "in-flight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1},
		{Name: "minimal", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
		{Name: "none", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay, CacheHits: sluice.CacheHitsNone},
		{Name: "full", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay, CacheHits: sluice.CacheHitsFull},
		{Name: "dollars", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricCost, Limit: 1_000_000, Period: sluice.PeriodDay},
		{Name: "fixed-tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: 100_000, Window: time.Minute,
			Reserve: sluice.ReserveFixed, ReserveAmount: 5000},
	}
}

func hit(key string, orig sluice.Usage) sluice.Request {
	return sluice.Request{Identity: sluice.Identity{Key: key}, Max: orig, CacheHit: true}
}

func TestLimiter_CacheHitChargesPerRule(t *testing.T) {
	l, _ := newLimiter(t, sluice.Options{Rules: hitRules()})
	orig := sluice.Usage{InputTokens: 300, OutputTokens: 200, Cost: 4_000}
	// Two hits at once: the concurrency rule (limit 1) holds no place for
	// either.
	a := admit(t, l, hit("k", orig))
	b := admit(t, l, hit("k", orig))
	settle(t, a, sluice.Usage{})
	settle(t, b, sluice.Usage{})
	want := map[string]int64{"rpm": 2, "minimal": 2, "none": 0, "full": 1000, "dollars": 2, "fixed-tpm": 2}
	for _, c := range a.Charges() {
		if c.Kind == sluice.KindConcurrency {
			t.Fatalf("a hit holds a concurrency place: %+v", c)
		}
	}
	eff, err := l.Effective(context.Background(), sluice.Identity{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eff {
		if w, ok := want[e.Rule]; ok && e.Used != w {
			t.Errorf("rule %s counted %d for two hits, want %d", e.Rule, e.Used, w)
		}
	}
}

func TestLimiter_CacheHitRefusedBySpentBudget(t *testing.T) {
	l, _ := withRules(t, sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 500, Period: sluice.PeriodDay})
	settle(t, admit(t, l, tokens("k", 100, 400)), sluice.Usage{InputTokens: 100, OutputTokens: 400})
	_, err := l.Admit(context.Background(), hit("k", sluice.Usage{InputTokens: 1, OutputTokens: 1}))
	var bu *sluice.BudgetError
	if !errors.As(err, &bu) || bu.Rule != "daily" {
		t.Fatalf("a hit on a spent budget: %v, want its budget refusal", err)
	}
}

func TestRule_CacheHitsValidated(t *testing.T) {
	_, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: []sluice.Rule{{Name: "b", Kind: sluice.KindBudget, Subject: "key",
		Limit: 1, Period: sluice.PeriodDay, CacheHits: "some"}}})
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Field != "cache_hits" {
		t.Fatalf("cache_hits: some: %v, want a rule error on cache_hits", err)
	}
}

// For any sequence of hits and misses, no budget's total is lower than
// what its cache_hits setting says the hits cost, plus the misses' usage.
func TestLimiter_CacheHitChargesProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		l, _ := newLimiter(rt, sluice.Options{Rules: hitRules()})
		floor := map[string]int64{}
		n := rapid.IntRange(1, 30).Draw(rt, "calls")
		for i := range n {
			u := sluice.Usage{InputTokens: rapid.Int64Range(0, 2000).Draw(rt, "in"), OutputTokens: rapid.Int64Range(0, 2000).Draw(rt, "out")}
			u.Cost = u.InputTokens + 2*u.OutputTokens
			isHit := rapid.Bool().Draw(rt, "hit")
			req := sluice.Request{Identity: sluice.Identity{Key: "k"}, Max: u, CacheHit: isHit}
			r, err := l.Admit(context.Background(), req)
			if err != nil {
				rt.Fatalf("call %d: %v", i, err)
			}
			if isHit {
				floor["minimal"]++
				floor["full"] += u.InputTokens + u.OutputTokens
				floor["dollars"]++
				err = r.Settle(context.Background(), sluice.Usage{})
			} else {
				for _, name := range []string{"minimal", "none", "full"} {
					floor[name] += u.InputTokens + u.OutputTokens
				}
				floor["dollars"] += u.Cost
				err = r.Settle(context.Background(), u)
			}
			if err != nil {
				rt.Fatalf("settle %d: %v", i, err)
			}
		}
		eff, err := l.Effective(context.Background(), sluice.Identity{Key: "k"})
		if err != nil {
			rt.Fatal(err)
		}
		for _, e := range eff {
			if w, ok := floor[e.Rule]; ok && e.Used < w {
				rt.Fatalf("budget %s counted %d, less than the %d its hits and misses cost", e.Rule, e.Used, w)
			}
		}
	})
}
