package admin

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// Headroom gauges cover the deployment's rules and the listed workspaces
// only: never a user, never a workspace nobody listed.
func TestMetrics_HeadroomOfDeploymentRulesAndListedWorkspaces(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	rules := []sluice.Rule{
		{Name: "global_cost", Kind: sluice.KindBudget, Subject: "global", Metric: sluice.MetricCost, Limit: 1000, Period: sluice.PeriodDay},
		{Name: "large_rpm", Kind: sluice.KindRate, Subject: "global", Limit: 10, Window: time.Minute, Match: sluice.Match{Models: []string{"mock-large"}}},
		{Name: "max_in_flight", Kind: sluice.KindConcurrency, Subject: "server", Limit: 16},
		{Name: "daily_token_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 5000, Period: sluice.PeriodDay},
		{Name: "rate_per_minute", Kind: sluice.KindRate, Subject: "workspace+user", Limit: 20, Window: time.Minute},
	}
	l, err := sluice.New(sluice.Options{Store: m.Store(memstore.New(memstore.Options{})), Rules: rules, ServerID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	m.WatchHeadroom(l, []HeadroomWorkspace{{Org: "default", Workspace: "acme"}})
	ctx := context.Background()
	for _, ws := range []string{"acme", "beta"} {
		if _, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Org: "default", Workspace: ws, User: "ada", Model: "mock-large"},
			Max: sluice.Usage{InputTokens: 100, Cost: 50}}); err != nil {
			t.Fatal(err)
		}
	}
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type series struct{ rule, model, workspace string }
	got := map[string]map[series]float64{}
	for _, f := range families {
		if f.GetName() != "sluice_headroom_remaining" && f.GetName() != "sluice_headroom_limit" {
			continue
		}
		got[f.GetName()] = map[series]float64{}
		for _, mt := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range mt.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[f.GetName()][series{l["rule"], l["model"], l["workspace"]}] = mt.GetGauge().GetValue()
		}
	}
	want := map[string]map[series]float64{
		"sluice_headroom_remaining": {
			{"global_cost", "", ""}: 900, {"large_rpm", "mock-large", ""}: 8, {"max_in_flight", "", ""}: 14,
			{"daily_token_budget", "", "acme"}: 4900,
		},
		"sluice_headroom_limit": {
			{"global_cost", "", ""}: 1000, {"large_rpm", "mock-large", ""}: 10, {"max_in_flight", "", ""}: 16,
			{"daily_token_budget", "", "acme"}: 5000,
		},
	}
	for family, w := range want {
		if len(got[family]) != len(w) {
			t.Errorf("%s = %v, want %v", family, got[family], w)
			continue
		}
		for s, v := range w {
			if got[family][s] != v {
				t.Errorf("%s%+v = %v, want %v (all: %v)", family, s, got[family][s], v, got[family])
			}
		}
	}
}
