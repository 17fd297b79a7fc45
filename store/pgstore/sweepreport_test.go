package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestStore_SweepWithoutReport: the plain sweep (and a previous version's
// two-argument call) still settles, reporting nothing.
func TestStore_SweepWithoutReport(t *testing.T) {
	s := openStore(t, testSchema(t), pgstore.Options{PinTime: true})
	clock := storetest.NewClock(storetest.Start)
	l, err := sluice.New(sluice.Options{Store: s, Clock: clock, Rules: []sluice.Rule{
		{Name: "ws_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(context.Background(), sluice.Request{Identity: sluice.Identity{Workspace: "w"}, Max: sluice.Usage{OutputTokens: 10}, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Minute)
	if res, err := l.Sweep(context.Background()); err != nil || res.Charged != 1 {
		t.Fatalf("sweep %+v, %v", res, err)
	}
}
