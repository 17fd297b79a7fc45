package catalog

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
)

// refuseWorkspace returns a workspace whose ledger rows and call records
// the backend's database refuses: PostgreSQL refuses invalid UTF-8 by
// itself; SQLite, which stores any bytes, is given a unique index that one
// row of the workspace already fills in each table.
func refuseWorkspace(t *testing.T, be *backend, c *Catalog) string {
	t.Helper()
	if be.path == "" {
		return "bad\xff"
	}
	for _, s := range []string{
		`CREATE UNIQUE INDEX poison_ledger ON usage_ledger (workspace) WHERE workspace = 'poison'`,
		`INSERT INTO usage_ledger (org, workspace, day, route, model, key_id, user_id, team, tags, kind,
			requests, input_tokens, output_tokens, cached_input_tokens, tokens, cost_micros)
			VALUES ('default', 'poison', '2000-01-01', '', '', '', '', '', '', 'settled', 0, 0, 0, 0, 0, 0)`,
		`CREATE UNIQUE INDEX poison_calls ON call_records (workspace) WHERE workspace = 'poison'`,
		`INSERT INTO call_records (at, request_id, org, workspace, key_id, user_id, route, model, outcome,
			reserved_tokens, reserved_cost, input_tokens, output_tokens, cached_input_tokens, cost_micros)
			VALUES (0, '', 'default', 'poison', '', '', '', '', 'reported', 0, 0, 0, 0, 0, 0)`,
	} {
		if _, err := c.db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	return "poison"
}

func TestCatalog_FlushDropsARefusedEntryAlone(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		var mu sync.Mutex
		var told []error
		c, err := be.open(Options{FlushInterval: -1, OnFlushError: func(err error) {
			mu.Lock()
			told = append(told, err)
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ctx := context.Background()
		bad := refuseWorkspace(t, be, c)
		for _, ws := range []string{"acme", bad, "other"} {
			c.RecordUsage(UsageEntry{Workspace: ws, Route: "chat", Model: "gpt", At: day1, Requests: 1, InputTokens: 10})
			c.RecordCall(CallRecord{At: day1, RequestID: "req-" + ws, Workspace: ws, Outcome: OutcomeReported})
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("Flush with one refused entry: %v", err)
		}
		seeded := 0 // the rows refuseWorkspace wrote
		if be.path != "" {
			seeded = 1
		}
		if n := ledgerRows(t, c) - seeded; n != 2 {
			t.Fatalf("ledger has %d rows, want the 2 the database accepts", n)
		}
		calls, err := c.Calls(ctx, CallQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(calls)-seeded != 2 {
			t.Fatalf("%d call records written, want 2", len(calls))
		}
		s := c.LedgerStats()
		if s.RefusedRows != 1 || s.RefusedCalls != 1 || s.PendingRows != 0 || s.PendingCalls != 0 {
			t.Fatalf("LedgerStats = %+v, want 1 row and 1 call refused, nothing pending", s)
		}
		mu.Lock()
		n := len(told)
		mu.Unlock()
		if n != 2 {
			t.Fatalf("OnFlushError told %d times, want once per dropped entry: %v", n, told)
		}
		// The ledger goes on: the next entries are written.
		c.RecordUsage(UsageEntry{Workspace: "acme", Route: "chat", Model: "gpt", At: day2, Requests: 1})
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if n := ledgerRows(t, c) - seeded; n != 3 {
			t.Fatalf("ledger has %d rows, want 3", n)
		}
	})
}

func TestCatalog_LedgerQueueIsBounded(t *testing.T) {
	c, _ := (&backend{name: "sqlite", d: sqliteDialect, path: t.TempDir() + "/catalog.db"}).openTest(t)
	ctx := context.Background()
	const extra = 100
	for i := range maxPendingRows + extra {
		c.RecordUsage(UsageEntry{Workspace: "acme", Route: "chat", Model: "gpt", At: day1, Tags: []string{"t" + strconv.Itoa(i)}, Requests: 1})
	}
	for i := range maxPendingCalls + 1 {
		c.RecordCall(CallRecord{At: day1, Workspace: "acme", RequestID: strconv.Itoa(i)})
	}
	s := c.LedgerStats()
	if s.PendingRows != maxPendingRows+1 || s.FoldedRows != extra || s.PendingCalls != maxPendingCalls || s.DroppedCalls != 1 {
		t.Fatalf("LedgerStats = %+v, want %d rows pending (one of them folded %d entries), %d calls and 1 dropped",
			s, maxPendingRows+1, extra, maxPendingCalls)
	}
	if err := c.LedgerBacklog(ctx); !errors.Is(err, ErrLedgerFull) {
		t.Fatalf("LedgerBacklog = %v, want ErrLedgerFull", err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.LedgerBacklog(ctx); err != nil {
		t.Fatalf("LedgerBacklog after a flush = %v", err)
	}
	rows, err := c.Usage(ctx, UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Requests != maxPendingRows+extra {
		t.Fatalf("Usage = %+v, want every request counted (%d)", rows, maxPendingRows+extra)
	}
}
