package catalog

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
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

// TestMigrate0009_KeepsTheCallRecords: rebuilding call_records without
// AUTOINCREMENT keeps every record and its id, and the next record's id
// follows the largest.
func TestMigrate0009_KeepsTheCallRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ms, err := sqliteDialect.migrations()
	if err != nil {
		t.Fatal(err)
	}
	var before []migrate.Migration
	for _, m := range ms {
		if m.Version <= 8 {
			before = append(before, m)
		}
	}
	ctx := context.Background()
	if err := migrate.Run(ctx, db, before, sqliteDialect.migrateOptions()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{7, 41} {
		if _, err := db.Exec(`INSERT INTO call_records (id, at, request_id, org, workspace, outcome, input_tokens) VALUES (?, 1, 'r', 'acme', 'w', 'reported', ?)`, id, id*10); err != nil {
			t.Fatal(err)
		}
	}
	if err := migrate.Run(ctx, db, ms, sqliteDialect.migrateOptions()); err != nil {
		t.Fatal(err)
	}
	var n, sum int
	if err := db.QueryRow(`SELECT count(*), sum(input_tokens) FROM call_records WHERE id IN (7, 41)`).Scan(&n, &sum); err != nil || n != 2 || sum != 480 {
		t.Fatalf("records after 0009: %d, tokens %d (%v); want both kept", n, sum, err)
	}
	res, err := db.Exec(`INSERT INTO call_records (at, org, workspace, outcome) VALUES (2, 'acme', 'w', 'reported')`)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := res.LastInsertId(); id != 42 {
		t.Fatalf("next id %d, want 42", id)
	}
	var sql string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'call_records'`).Scan(&sql); err != nil || strings.Contains(sql, "AUTOINCREMENT") {
		t.Fatalf("call_records is still AUTOINCREMENT: %s (%v)", sql, err)
	}
}
