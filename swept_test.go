package sluice_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/sqlitestore"
)

// TestLimiter_OnSweptTellsWhoAndWhat: a reservation left unsettled is
// charged by the sweep, and OnSwept hears the attributes its counters name
// (a workspace, team and user within their org, a key, a tag) and what its
// budgets were charged, per metric: the amounts the store holds.
func TestLimiter_OnSweptTellsWhoAndWhat(t *testing.T) {
	rules := []sluice.Rule{
		{Name: "ws_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
		{Name: "team_user_cost", Kind: sluice.KindBudget, Subject: "team+user", Metric: sluice.MetricCost, Limit: 1_000_000, Period: sluice.PeriodDay},
		{Name: "key_rate", Kind: sluice.KindRate, Subject: "key", Limit: 100, Window: time.Minute},
		{Name: "per_tag", Kind: sluice.KindBudget, Subject: "tag", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
		{Name: "released", Kind: sluice.KindBudget, Subject: "model", Metric: sluice.MetricRequests, Limit: 10, Period: sluice.PeriodDay, OnExpiry: sluice.ExpiryRelease},
	}
	for _, store := range []string{"memory", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			var mu sync.Mutex
			var swept []sluice.SweptReservation
			opts := sluice.Options{Rules: rules, OnSwept: func(s sluice.SweptReservation) {
				mu.Lock()
				defer mu.Unlock()
				swept = append(swept, s)
			}}
			if store == "sqlite" {
				s, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(t.TempDir(), "s.db")})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				opts.Store = s
			}
			l, clock := newLimiter(t, opts)
			for _, org := range []string{"acme", ""} {
				req := sluice.Request{Identity: sluice.Identity{Org: org, Workspace: "w", Team: "red", User: "ann", Key: "k1", Model: "m", Tags: []string{"eval"}},
					Max: sluice.Usage{InputTokens: 300, OutputTokens: 700, Cost: 4200}, Timeout: time.Second}
				admit(t, l, req) // never settled
			}
			clock.Advance(time.Hour)
			res, err := l.Sweep(context.Background())
			if err != nil || res.Reservations != 2 {
				t.Fatalf("sweep: %+v, %v; want 2 reservations", res, err)
			}
			mu.Lock()
			defer mu.Unlock()
			slices.SortFunc(swept, func(a, b sluice.SweptReservation) int { return cmpString(a.Identity.Org, b.Identity.Org) })
			if len(swept) != 2 {
				t.Fatalf("OnSwept heard %d reservations, want 2", len(swept))
			}
			for i, org := range []string{"acme", "default"} {
				s := swept[i]
				id := s.Identity
				if !s.Known || id.Org != org || id.Workspace != "w" || id.Team != "red" || id.User != "ann" || id.Key != "k1" || id.Model != "m" || !slices.Equal(id.Tags, []string{"eval"}) {
					t.Errorf("identity %+v, want org %s, workspace w, team red, user ann, key k1, model m, tag eval", id, org)
				}
				if s.Charged[sluice.MetricTokens] != 1000 || s.Charged[sluice.MetricCost] != 4200 || s.Charged[sluice.MetricRequests] != 0 {
					t.Errorf("charged %v, want 1000 tokens, 4200 cost and the released budget nothing", s.Charged)
				}
			}
			// The store holds what OnSwept said.
			if used := effective(t, l, sluice.Identity{Org: "acme", Workspace: "w"}, "ws_tokens").Used; used != 1000 {
				t.Errorf("the store's budget holds %d, want the 1000 swept", used)
			}
		})
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
