package catalog

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/pgstore"
)

// sharedStore opens a catalog and a PostgreSQL counter store in two
// schemas of the test database, the store writing the catalog's ledger in
// its settlements (the catalog as its Recorder), and a Limiter with a
// daily token budget per workspace on the store.
func sharedStore(t *testing.T) (*Catalog, *sluice.Limiter) {
	t.Helper()
	be := &backend{name: "postgres", d: postgresDialect, url: testSchemaURL(t)}
	c, _ := be.openTest(t)
	storeURL := testSchemaURL(t)
	ctx := context.Background()
	if shared, err := c.SharesDatabase(ctx, storeURL); err != nil || !shared {
		t.Fatalf("SharesDatabase(another schema of the catalog's database) = %v, %v; want true", shared, err)
	}
	s, err := pgstore.Open(ctx, pgstore.Options{URL: storeURL, Recorder: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{
		{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c, l
}

// settleRecorded admits a call of workspace ws and settles it at in+out
// tokens, its ledger record attached; it returns whether the store took
// the record and Settle's error.
func settleRecorded(t *testing.T, l *sluice.Limiter, ws string, in, out int64) (taken bool, err error) {
	t.Helper()
	ctx := context.Background()
	r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: ws}, Max: sluice.Usage{InputTokens: 100, OutputTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	rec := LedgerRecord{
		Usage: UsageEntry{Workspace: ws, Route: "chat", Model: "m", Requests: 1, InputTokens: in, OutputTokens: out},
		Call:  CallRecord{Workspace: ws, Route: "chat", Model: "m", Outcome: OutcomeReported, ReservedTokens: 200, InputTokens: in, OutputTokens: out},
	}
	sctx, wasTaken := pgstore.WithRecord(ctx, rec)
	err = r.Settle(sctx, sluice.Usage{InputTokens: in, OutputTokens: out})
	return wasTaken(), err
}

// TestQueueRecords_LedgerCommitsWithTheSettlement: a settlement of a
// counter store in another schema of the catalog's database writes the
// call's ledger row and call record in its own commit: they are there when
// Settle returns, with nothing flushed.
func TestQueueRecords_LedgerCommitsWithTheSettlement(t *testing.T) {
	c, l := sharedStore(t)
	for range 2 {
		if taken, err := settleRecorded(t, l, "w", 30, 10); err != nil || !taken {
			t.Fatalf("settle: %v, taken %v", err, taken)
		}
	}
	ctx := context.Background()
	rows, err := c.Usage(ctx, UsageQuery{Workspace: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Requests != 2 || rows[0].Tokens != 80 || rows[0].InputTokens != 60 {
		t.Errorf("ledger %+v, want 2 requests of 80 tokens (60 input)", rows)
	}
	calls, err := c.Calls(ctx, CallQuery{Workspace: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].OutputTokens != 10 || calls[0].Org != "default" {
		t.Errorf("call records %+v, want 2 of 10 output tokens in org default", calls)
	}
}

// TestQueueRecords_FailedSettlementLeavesNoLedgerRow: when the database
// refuses a call's ledger row, the settlement fails with it, and neither
// the row, nor the call record, nor the settlement is kept: the budget
// still holds the reservation.
func TestQueueRecords_FailedSettlementLeavesNoLedgerRow(t *testing.T) {
	c, l := sharedStore(t)
	ctx := context.Background()
	if _, err := c.db.ExecContext(ctx, `ALTER TABLE usage_ledger ADD CONSTRAINT test_refuses CHECK (workspace <> 'refused')`); err != nil {
		t.Fatal(err)
	}
	taken, err := settleRecorded(t, l, "refused", 30, 10)
	if err == nil || taken {
		t.Fatalf("settle of a refused ledger row: %v, taken %v; want an error, not taken", err, taken)
	}
	rows, err := c.Usage(ctx, UsageQuery{Workspace: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	calls, err := c.Calls(ctx, CallQuery{Workspace: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Requests != 0 || len(calls) != 0 {
		t.Errorf("after the failed settlement: ledger %+v, %d call records; want nothing", rows, len(calls))
	}
	limits, err := l.Effective(ctx, sluice.Identity{Workspace: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	if len(limits) != 1 || limits[0].Used != 200 {
		t.Errorf("after the failed settlement the budget is %+v, want used 200: the reservation, unsettled", limits)
	}
}

// otherDatabaseURL is the test URL on the server's postgres database, which
// holds no catalog of the tests.
func otherDatabaseURL(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/postgres"
	u.RawQuery = ""
	return u.String()
}

// TestSharesDatabase: a catalog shares its database with another schema of
// it, not with a database it is not in; on SQLite with none.
func TestSharesDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be := &backend{name: "postgres", d: postgresDialect, url: testSchemaURL(t)}
	c, _ := be.openTest(t)
	if shared, err := c.SharesDatabase(ctx, testSchemaURL(t)); err != nil || !shared {
		t.Errorf("another schema: %v, %v; want true", shared, err)
	}
	other := otherDatabaseURL(t)
	if shared, err := c.SharesDatabase(ctx, other); err != nil || shared {
		t.Errorf("another database: %v, %v; want false", shared, err)
	}
	lite, err := OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	if shared, err := lite.SharesDatabase(ctx, be.url); err != nil || shared {
		t.Errorf("SQLite: %v, %v; want false", shared, err)
	}
}
