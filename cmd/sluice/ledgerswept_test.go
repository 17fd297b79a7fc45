package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestLedger_SweptChargeRecorded: a reservation left unsettled is charged
// by the sweep at its deadline, and the ledger shows that charge, marked as
// swept, with the amount the store's budget holds, and a call record of
// outcome swept.
func TestLedger_SweptChargeRecorded(t *testing.T) {
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	clock := storetest.NewClock(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	rules := []sluice.Rule{{Name: "daily_token_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}}
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: rules, Clock: clock, OnSwept: ledger{cat: cat}.RecordSwept})
	if err != nil {
		t.Fatal(err)
	}
	id := sluice.Identity{Org: "acme", Workspace: "w", User: "ann", Key: "k1", Model: "mock-small", Route: "chat"}
	if _, err := l.Admit(context.Background(), sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 21, OutputTokens: 400}, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if res, err := l.Sweep(context.Background()); err != nil || res.Charged != 1 {
		t.Fatalf("sweep %+v, %v; want one charge", res, err)
	}
	if err := cat.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := cat.Usage(context.Background(), catalog.UsageQuery{Org: "acme", Workspace: "w", GroupBy: []string{"kind"}})
	if err != nil {
		t.Fatal(err)
	}
	eff, err := l.Effective(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Kind != "swept" || rows[0].Tokens != 421 || rows[0].SweptRequests != 1 || eff[0].Used != rows[0].Tokens {
		t.Fatalf("ledger %+v, store's budget %d; want one swept row of 421 tokens, as the store holds", rows, eff[0].Used)
	}
	calls, err := cat.Calls(context.Background(), catalog.CallQuery{})
	if err != nil || len(calls) != 1 || calls[0].Outcome != catalog.OutcomeSwept || calls[0].ReservedTokens != 421 || calls[0].Workspace != "w" {
		t.Fatalf("calls %+v, %v; want one swept call of 421 tokens", calls, err)
	}
}
