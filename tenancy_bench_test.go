package sluice_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// BenchmarkAdmitSettleOrgRules admits and settles one call of an org with
// 200 rules of its own (each on one model, so that one applies), beside
// the deployment's three rules, with that org alone and among 100 orgs of
// 200 rules each: an admission looks at its own org's rules only, so the
// two cost the same. "deployment_only" is the peer: the three rules and
// no org rules at all.
func BenchmarkAdmitSettleOrgRules(b *testing.B) {
	for _, orgs := range []int{0, 1, 100} {
		name := fmt.Sprintf("orgs=%d", orgs)
		if orgs == 0 {
			name = "deployment_only"
		}
		b.Run(name, func(b *testing.B) {
			rules := []sluice.Rule{
				{Name: "rpm", Kind: sluice.KindRate, Subject: "workspace+user", Limit: benchRequestsPerMinute, Window: time.Minute},
				{Name: "tpm", Kind: sluice.KindRate, Subject: "workspace", Metric: sluice.MetricTokens, Limit: benchTokensPerMinute, Window: time.Minute},
				{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: benchTokensPerMinute, Period: sluice.PeriodDay},
			}
			for o := range orgs {
				for i := range 200 {
					rules = append(rules, sluice.Rule{Name: fmt.Sprintf("r%d", i), Org: fmt.Sprintf("org-%d", o), Kind: sluice.KindRate,
						Subject: "user", Limit: benchRequestsPerMinute, Window: time.Minute, Match: sluice.Match{Models: []string{fmt.Sprintf("model-%d", i)}}})
				}
			}
			l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), ServerID: "bench", Rules: rules})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			req := sluice.Request{Identity: sluice.Identity{Org: "org-0", Workspace: "ws", User: "u", Key: "k", Model: "model-7"}, Max: benchMax}
			b.ReportAllocs()
			for b.Loop() {
				r, err := l.Admit(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Settle(ctx, benchUsed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
