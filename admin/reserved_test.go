package admin

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice"
)

// A replica's budgets show what the other replicas sharing its store hold
// in open reservations, not only its own.
func TestAPI_BudgetsReservedAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	other, err := sluice.New(sluice.Options{Store: NewMetrics(MetricsOptions{}).Store(e.mem), Rules: baseRules, ServerID: "replica-b", Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := sluice.Identity{Org: "default", Workspace: "acme", User: "ada"}
	theirs, err := other.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 700}})
	if err != nil {
		t.Fatal(err)
	}
	ours, err := e.limiter.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 200}})
	if err != nil {
		t.Fatal(err)
	}
	reserved := func(want float64) {
		t.Helper()
		r := e.must(http.StatusOK, "GET", "/admin/v1/budgets?workspace=acme", rootToken, nil)
		if daily := limitIn(t, r, "budgets", "daily_token_budget"); daily == nil || daily["reserved"] != want || daily["used"] != want {
			t.Fatalf("daily budget = %v, want %v reserved and used", daily, want)
		}
	}
	reserved(900)
	if err := theirs.Release(ctx); err != nil {
		t.Fatal(err)
	}
	reserved(200)
	if err := ours.Release(ctx); err != nil {
		t.Fatal(err)
	}
	reserved(0)
	// max_in_flight counts per server: the other replica's lease is on
	// its own counter, and this one's shows in reserved.
	lease, err := e.limiter.Admit(ctx, sluice.Request{Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if _, err := other.Admit(ctx, sluice.Request{Identity: id}); err != nil {
		t.Fatal(err)
	}
	r := e.must(http.StatusOK, "GET", "/admin/v1/effective?workspace=acme&user=ada", rootToken, nil)
	if inFlight := limitIn(t, r, "limits", "max_in_flight"); inFlight == nil || inFlight["reserved"] != float64(1) {
		t.Fatalf("max_in_flight = %v, want 1 reserved", inFlight)
	}
}
