package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestStore_SweepReportTellsWhatItCharged: a reservation left unsettled is
// swept, and the Limiter's OnSwept hears the workspace (within its org) and
// the amount the budget was charged.
func TestStore_SweepReportTellsWhatItCharged(t *testing.T) {
	url := redisURL(t)
	s := openStore(t, redisstore.Options{URL: url, PinTime: true})
	var _ sluice.SweepReporter = s
	clock := storetest.NewClock(awayFromMidnight())
	var swept []sluice.SweptReservation
	l, err := sluice.New(sluice.Options{Store: s, Clock: clock, Rules: []sluice.Rule{
		{Name: "ws_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
		{Name: "user_busy", Kind: sluice.KindConcurrency, Subject: "user", Limit: 5},
	}, OnSwept: func(r sluice.SweptReservation) { swept = append(swept, r) }})
	if err != nil {
		t.Fatal(err)
	}
	id := sluice.Identity{Org: "acme", Workspace: "w{1}", User: "ann"}
	if _, err := l.Admit(context.Background(), sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 40, OutputTokens: 600}, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Minute)
	res, err := l.Sweep(context.Background())
	if err != nil || res.Reservations != 1 || res.Charged != 1 {
		t.Fatalf("sweep %+v, %v", res, err)
	}
	if len(swept) != 1 {
		t.Fatalf("OnSwept heard %d, want 1", len(swept))
	}
	got := swept[0]
	if !got.Known || got.Identity.Org != "acme" || got.Identity.Workspace != "w{1}" || got.Identity.User != "ann" || got.Charged[sluice.MetricTokens] != 640 {
		t.Fatalf("swept %+v, want acme's w{1} and ann, charged 640 tokens", got)
	}
	eff, err := l.Effective(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eff {
		if e.Rule == "ws_tokens" && e.Used != 640 {
			t.Errorf("the store holds %d, want the 640 reported", e.Used)
		}
	}
}

// awayFromMidnight is now, unless the tests' five minutes would cross midnight UTC
// (a budget's day): then a minute after it.
func awayFromMidnight() time.Time {
	now := time.Now()
	if next := now.Truncate(24 * time.Hour).Add(24 * time.Hour); next.Sub(now) < 10*time.Minute {
		return next.Add(time.Minute)
	}
	return now
}
