package catalog

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/migrate"
)

// TestMigrate0006_KeepsTheLedger: a SQLite catalog migrated by the previous
// version (0001 to 0005) keeps its ledger rows when 0006 adds attribution:
// each is a settled row with no key, user, team or tags, and tokens counted
// as input plus output.
func TestMigrate0006_KeepsTheLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := sqliteDialect.migrations()
	if err != nil {
		t.Fatal(err)
	}
	var before []migrate.Migration
	for _, m := range ms {
		if m.Version <= 5 {
			before = append(before, m)
		}
	}
	ctx := context.Background()
	if err := migrate.Run(ctx, db, before, sqliteDialect.migrateOptions()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO usage_ledger (org, workspace, day, route, model, requests, input_tokens, output_tokens, cached_input_tokens, cost_micros)
		VALUES ('acme', 'w', '2026-03-14', 'chat', 'gpt', 3, 100, 50, 10, 999)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	c, err := OpenSQLite(path, Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rows, err := c.Usage(ctx, UsageQuery{GroupBy: []string{"org", "workspace", "key", "tag", "kind"}})
	if err != nil {
		t.Fatal(err)
	}
	want := UsageRow{Org: "acme", Workspace: "w", Kind: "settled", Requests: 3, InputTokens: 100, OutputTokens: 50, CachedInputTokens: 10, Tokens: 150, CostMicros: 999}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("after 0006: %+v, want %+v", rows, want)
	}
	// New entries of the same day and model add to their own rows.
	c.RecordUsage(UsageEntry{Org: "acme", Workspace: "w", Route: "chat", Model: "gpt", At: day1, KeyID: "k", Requests: 1, InputTokens: 1})
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if total, err := c.Usage(ctx, UsageQuery{Org: "acme"}); err != nil || len(total) != 1 || total[0].Requests != 4 || total[0].Tokens != 151 {
		t.Fatalf("total %+v, %v; want 4 requests, 151 tokens", total, err)
	}
}
