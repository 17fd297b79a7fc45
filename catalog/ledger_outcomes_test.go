package catalog

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestCatalog_RefusedCalls: refused calls are call records with their
// refusal's outcome, selected by it or all at once (OutcomeRefused), and
// counted by key and outcome with the settled ones.
func TestCatalog_RefusedCalls(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		start := clock.Now()
		for i, r := range []CallRecord{
			{RequestID: "r1", Org: "acme", Workspace: "w", KeyID: "k1", Outcome: OutcomeReported, InputTokens: 10},
			{RequestID: "r2", Org: "acme", Workspace: "w", KeyID: "k1", Outcome: "rate_limited"},
			{RequestID: "r3", Org: "acme", Workspace: "w", KeyID: "k1", Outcome: "rate_limited"},
			{RequestID: "r4", Org: "acme", Workspace: "w", KeyID: "k2", Outcome: "budget_exceeded"},
			{RequestID: "r5", Org: "acme", Workspace: "v", KeyID: "k3", Outcome: OutcomeSwept},
			{RequestID: "r6", Org: "acme", Workspace: "v", KeyID: "k3", Outcome: OutcomeCacheHit},
		} {
			r.At = start.Add(time.Duration(i) * time.Minute)
			c.RecordCall(r)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			q    CallQuery
			want []string
		}{
			{"refused", CallQuery{Outcome: OutcomeRefused}, []string{"r4", "r3", "r2"}},
			{"one outcome", CallQuery{Outcome: "rate_limited"}, []string{"r3", "r2"}},
			{"refused, one key", CallQuery{Outcome: OutcomeRefused, KeyID: "k2"}, []string{"r4"}},
			{"settled outcome", CallQuery{Outcome: OutcomeSwept}, []string{"r5"}},
			{"cache hits are settled, not refused", CallQuery{Outcome: OutcomeCacheHit}, []string{"r6"}},
		} {
			rs, err := c.Calls(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, r.RequestID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
		counts, err := c.CallOutcomes(ctx, CallQuery{Workspace: "w"})
		if err != nil {
			t.Fatal(err)
		}
		want := []OutcomeCount{
			{Org: "acme", Workspace: "w", KeyID: "k1", Outcome: "rate_limited", Calls: 2},
			{Org: "acme", Workspace: "w", KeyID: "k1", Outcome: OutcomeReported, Calls: 1},
			{Org: "acme", Workspace: "w", KeyID: "k2", Outcome: "budget_exceeded", Calls: 1},
		}
		if !slices.Equal(counts, want) {
			t.Errorf("CallOutcomes = %+v\nwant %+v", counts, want)
		}
		if counts, err := c.CallOutcomes(ctx, CallQuery{Outcome: OutcomeRefused, Since: start.Add(2 * time.Minute)}); err != nil || len(counts) != 2 || counts[0].Calls != 1 {
			t.Errorf("refused since r3: %+v, %v; want k1 rate_limited 1, k2 budget_exceeded 1", counts, err)
		}
	})
}
