package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/sqlitestore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestSweepReport_TellsOfLeftoverReservations: a reservation a previous
// process left open is charged when the store opens, and the first
// SweepReport tells of it (once), so that it reaches a ledger as the
// sweep's charges do.
func TestSweepReport_TellsOfLeftoverReservations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	rules := []sluice.Rule{{Name: "ws_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}}
	clock := storetest.NewClock(storetest.Start)
	open := func(onSwept func(sluice.SweptReservation)) (*sqlitestore.Store, *sluice.Limiter) {
		s, err := sqlitestore.Open(sqlitestore.Options{Path: path, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		l, err := sluice.New(sluice.Options{Store: s, Clock: clock, Rules: rules, OnSwept: onSwept})
		if err != nil {
			t.Fatal(err)
		}
		return s, l
	}
	s, l := open(nil)
	id := sluice.Identity{Org: "acme", Workspace: "w"}
	if _, err := l.Admit(context.Background(), sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 7, OutputTokens: 93}, Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // the reservation stays open in the journal
		t.Fatal(err)
	}
	var swept []sluice.SweptReservation
	s, l = open(func(r sluice.SweptReservation) { swept = append(swept, r) })
	defer s.Close()
	for range 2 {
		if _, err := l.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(swept) != 1 || swept[0].Identity.Workspace != "w" || swept[0].Identity.Org != "acme" || swept[0].Charged[sluice.MetricTokens] != 100 {
		t.Fatalf("swept %+v, want acme's w charged 100 tokens, once", swept)
	}
	eff, err := l.Effective(context.Background(), id)
	if err != nil || len(eff) != 1 || eff[0].Used != 100 {
		t.Fatalf("the store holds %+v, %v; want the 100 reported", eff, err)
	}
}

// TestSweepReport_CrashLoopLosesNoRecoveredCharge: a process that opens the
// store (charging what a crash left open) and dies before its first sweep
// report does not take the report with it: the next process tells of the
// charge, once, without charging it again, until a second report.
func TestSweepReport_CrashLoopLosesNoRecoveredCharge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	rules := []sluice.Rule{{Name: "ws_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}}
	clock := storetest.NewClock(storetest.Start)
	var swept []sluice.SweptReservation
	open := func() (*sqlitestore.Store, *sluice.Limiter) {
		s, err := sqlitestore.Open(sqlitestore.Options{Path: path, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		l, err := sluice.New(sluice.Options{Store: s, Clock: clock, Rules: rules, OnSwept: func(r sluice.SweptReservation) { swept = append(swept, r) }})
		if err != nil {
			t.Fatal(err)
		}
		return s, l
	}
	ctx := context.Background()
	id := sluice.Identity{Org: "acme", Workspace: "w"}
	s, l := open()
	if _, err := l.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 7, OutputTokens: 93}, Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s.Close()     // the reservation stays open in the journal
	for range 3 { // three processes that die before their first sweep
		s, _ = open()
		s.Close()
	}
	s, l = open()
	for range 2 {
		if _, err := l.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(swept) != 1 || swept[0].Charged[sluice.MetricTokens] != 100 {
		t.Fatalf("swept %+v, want the 100 tokens told of once", swept)
	}
	if eff, err := l.Effective(ctx, id); err != nil || eff[0].Used != 100 {
		t.Fatalf("the store holds %+v, %v; want 100, charged once", eff, err)
	}
	// Told of twice over: a later process tells of nothing.
	s.Close()
	s, l = open()
	defer s.Close()
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if len(swept) != 1 {
		t.Fatalf("swept %+v after a restart, want nothing more", swept)
	}
}
