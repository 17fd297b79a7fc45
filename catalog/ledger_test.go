package catalog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

func ledgerRows(t *testing.T, c *Catalog) int {
	t.Helper()
	var n int
	if err := c.db.QueryRow(`SELECT COUNT(*) FROM usage_ledger`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var (
	day1 = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	day2 = time.Date(2026, 3, 15, 23, 59, 59, 0, time.UTC)
	day3 = time.Date(2026, 3, 16, 0, 0, 0, 0, time.UTC)
)

// recordSample records, for workspace acme, day1: chat/gpt twice and
// chat/claude once; day2: embed/gpt once; day3: chat/gpt once; and for
// workspace other, day1: chat/gpt once.
func recordSample(c *Catalog) {
	e := func(ws, route, model string, at time.Time, in int64) UsageEntry {
		return UsageEntry{Workspace: ws, Route: route, Model: model, At: at,
			Requests: 1, InputTokens: in, OutputTokens: 2 * in, CachedInputTokens: in / 10, CostMicros: 3 * in}
	}
	c.RecordUsage(e("acme", "chat", "gpt", day1, 100))
	c.RecordUsage(e("acme", "chat", "gpt", day1.Add(time.Hour), 200))
	c.RecordUsage(e("acme", "chat", "claude", day1, 1000))
	c.RecordUsage(e("acme", "embed", "gpt", day2, 10))
	c.RecordUsage(e("acme", "chat", "gpt", day3, 50))
	c.RecordUsage(e("other", "chat", "gpt", day1, 7))
}

func row(ws, day, route, model string, requests, in int64) UsageRow {
	return UsageRow{Workspace: ws, Day: day, Route: route, Model: model, Requests: requests,
		InputTokens: in, OutputTokens: 2 * in, CachedInputTokens: in / 10, Tokens: 3 * in, CostMicros: 3 * in}
}

func TestCatalog_RecordUsageWaitsForFlush(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		recordSample(c)
		if n := ledgerRows(t, c); n != 0 {
			t.Fatalf("RecordUsage wrote %d rows before any flush", n)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if n := ledgerRows(t, c); n != 5 {
			t.Fatalf("ledger has %d rows after flush, want 5 (one per workspace, day, route, model)", n)
		}
		// A second flush adds to the rows already there.
		c.RecordUsage(UsageEntry{Workspace: "acme", Route: "chat", Model: "gpt", At: day1, Requests: 1, InputTokens: 100, OutputTokens: 200, CachedInputTokens: 10, CostMicros: 300})
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil { // nothing pending: a no-op
			t.Fatal(err)
		}
		got, err := c.Usage(ctx, UsageQuery{Workspace: "acme", From: day1, To: day1, GroupBy: []string{"route", "model"}})
		if err != nil {
			t.Fatal(err)
		}
		want := []UsageRow{row("acme", "", "chat", "claude", 1, 1000), row("acme", "", "chat", "gpt", 3, 400)}
		if !slices.Equal(got, want) {
			t.Fatalf("Usage = %+v\nwant    %+v", got, want)
		}
	})
}

func TestCatalog_UsageGrouping(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		recordSample(c)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			q    UsageQuery
			want []UsageRow
		}{
			{"total", UsageQuery{Workspace: "acme"}, []UsageRow{row("acme", "", "", "", 5, 1360)}},
			{"everything", UsageQuery{}, []UsageRow{row("", "", "", "", 6, 1367)}},
			{"by workspace", UsageQuery{GroupBy: []string{"workspace"}},
				[]UsageRow{row("acme", "", "", "", 5, 1360), row("other", "", "", "", 1, 7)}},
			{"by day", UsageQuery{Workspace: "acme", GroupBy: []string{"day"}}, []UsageRow{
				row("acme", "2026-03-14", "", "", 3, 1300), row("acme", "2026-03-15", "", "", 1, 10), row("acme", "2026-03-16", "", "", 1, 50)}},
			{"by model", UsageQuery{Workspace: "acme", GroupBy: []string{"model"}},
				[]UsageRow{row("acme", "", "", "claude", 1, 1000), row("acme", "", "", "gpt", 4, 360)}},
			{"by day and model, range inclusive", UsageQuery{Workspace: "acme", From: day2, To: day3, GroupBy: []string{"day", "model", "day"}}, []UsageRow{
				row("acme", "2026-03-15", "", "gpt", 1, 10), row("acme", "2026-03-16", "", "gpt", 1, 50)}},
			{"from only", UsageQuery{Workspace: "acme", From: day3, GroupBy: []string{"route"}}, []UsageRow{row("acme", "", "chat", "", 1, 50)}},
			{"to only, any time of day", UsageQuery{Workspace: "acme", To: day1.Add(14 * time.Hour), GroupBy: []string{"route"}}, []UsageRow{row("acme", "", "chat", "", 3, 1300)}},
			{"all columns", UsageQuery{Workspace: "other", GroupBy: []string{"day", "route", "model"}}, []UsageRow{row("other", "2026-03-14", "chat", "gpt", 1, 7)}},
			{"no match", UsageQuery{Workspace: "nobody", GroupBy: []string{"day"}}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := c.Usage(ctx, tc.q)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("Usage = %+v\nwant    %+v", got, tc.want)
				}
			})
		}
		if _, err := c.Usage(ctx, UsageQuery{GroupBy: []string{"prompt"}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("group by prompt: err = %v, want ErrInvalid", err)
		}
		if _, err := c.Usage(ctx, UsageQuery{From: day2, To: day1}); !errors.Is(err, ErrInvalid) {
			t.Errorf("from after to: err = %v, want ErrInvalid", err)
		}
	})
}

func TestCatalog_RecordUsageUTCDay(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		sydney := time.FixedZone("AEDT", 11*3600)
		// 08:00 on the 15th in Sydney is 21:00 on the 14th in UTC.
		c.RecordUsage(UsageEntry{Workspace: "w", At: time.Date(2026, 3, 15, 8, 0, 0, 0, sydney), Requests: 1})
		c.RecordUsage(UsageEntry{Workspace: "w", Requests: 1}) // At zero: the clock's now, the 14th
		c.RecordUsage(UsageEntry{Workspace: "w", At: time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), Requests: 1})
		clock.Advance(24 * time.Hour)
		c.RecordUsage(UsageEntry{Workspace: "w", Requests: 1})
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := c.Usage(ctx, UsageQuery{Workspace: "w", GroupBy: []string{"day"}})
		if err != nil {
			t.Fatal(err)
		}
		want := []UsageRow{{Workspace: "w", Day: "1969-12-31", Requests: 1}, {Workspace: "w", Day: "2026-03-14", Requests: 2}, {Workspace: "w", Day: "2026-03-15", Requests: 1}}
		if !slices.Equal(got, want) {
			t.Fatalf("Usage = %+v\nwant    %+v", got, want)
		}
	})
}

func TestCatalog_FlushFailureKeepsSums(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		be.refuseInserts(t, c, "usage_ledger")
		c.RecordUsage(UsageEntry{Workspace: "w", Model: "m", At: day1, Requests: 1, InputTokens: 5})
		if err := c.Flush(ctx); err == nil {
			t.Fatal("Flush succeeded past a refusing trigger")
		}
		c.RecordUsage(UsageEntry{Workspace: "w", Model: "m", At: day1, Requests: 1, InputTokens: 5})
		be.allowInserts(t, c, "usage_ledger")
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := c.Usage(ctx, UsageQuery{Workspace: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Requests != 2 || got[0].InputTokens != 10 {
			t.Fatalf("Usage after a failed then a good flush = %+v, want 2 requests, 10 tokens", got)
		}
	})
}

func TestCatalog_RecordUsageConcurrentWithFlush(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		const writers, each = 8, 500
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					c.RecordUsage(UsageEntry{Workspace: "w", Model: []string{"a", "b"}[(w+i)%2], At: day1, Requests: 1, CostMicros: 2})
				}
			})
		}
		flushDone := make(chan struct{})
		go func() {
			defer close(flushDone)
			for range 20 {
				if err := c.Flush(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
		wg.Wait()
		<-flushDone
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := c.Usage(ctx, UsageQuery{Workspace: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Requests != writers*each || got[0].CostMicros != 2*writers*each {
			t.Fatalf("Usage = %+v, want %d requests", got, writers*each)
		}
	})
}

func TestCatalog_BackgroundFlushAndClose(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		ctx := context.Background()
		c, err := be.open(Options{FlushInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c.RecordUsage(UsageEntry{Workspace: "w", At: day1, Requests: 1})
		deadline := time.Now().Add(10 * time.Second)
		for ledgerRows(t, c) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the background flusher wrote nothing in 10s")
			}
			time.Sleep(time.Millisecond)
		}
		// Close writes what is still pending.
		c.RecordUsage(UsageEntry{Workspace: "w", At: day1, Requests: 1})
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		c, err = be.open(Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got, err := c.Usage(ctx, UsageQuery{Workspace: "w"})
		if err != nil || len(got) != 1 || got[0].Requests != 2 {
			t.Fatalf("Usage after reopen = %+v, %v; want 2 requests", got, err)
		}
	})
}

// BenchmarkRecordUsage measures the ledger's cost on the request path: a
// lock and a map update, no database.
func BenchmarkRecordUsage(b *testing.B) {
	c, err := OpenSQLite(filepath.Join(b.TempDir(), "c.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	e := UsageEntry{Workspace: "acme", Route: "chat", Model: "gpt", Requests: 1, InputTokens: 1000, OutputTokens: 200, CostMicros: 1500}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.RecordUsage(e)
		}
	})
}

// The background flusher writes an entry as soon as it is recorded, not at
// the next interval.
func TestCatalog_LedgerWrittenAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, err := be.open(Options{FlushInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ctx := context.Background()
		waitFor := func(requests int64) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, err := c.Usage(ctx, UsageQuery{Workspace: "w"})
				if err == nil && len(got) == 1 && got[0].Requests == requests {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("ledger %+v (%v), want %d requests written without a Flush", got, err, requests)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		// FlushInterval is an hour: only the write at once can pass.
		c.RecordUsage(UsageEntry{Workspace: "w", Model: "m", Requests: 1, InputTokens: 5})
		waitFor(1)
		c.RecordUsage(UsageEntry{Workspace: "w", Model: "m", Requests: 1, InputTokens: 5})
		waitFor(2)
	})
}

// After a failed write the flusher tries again by itself, FlushInterval
// later, with the sums it kept.
func TestCatalog_LedgerWriteRetried(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		flushErrors := make(chan error, 64)
		c, err := be.open(Options{FlushInterval: 20 * time.Millisecond, OnFlushError: func(err error) {
			select {
			case flushErrors <- err:
			default:
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		be.refuseInserts(t, c, "usage_ledger")
		c.RecordUsage(UsageEntry{Workspace: "w", Model: "m", Requests: 1, InputTokens: 5})
		select {
		case <-flushErrors:
		case <-time.After(10 * time.Second):
			t.Fatal("no failed write reported")
		}
		be.allowInserts(t, c, "usage_ledger")
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := c.Usage(context.Background(), UsageQuery{Workspace: "w"})
			if err == nil && len(got) == 1 && got[0].Requests == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("ledger %+v (%v): the kept sums were not written again", got, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// BenchmarkLedgerWrite measures the ledger's write on SQLite, the default
// catalog: one op is one call's usage entry (and call record), written in
// groups of 20, 100 and 400 calls, as the flusher does for a gateway serving
// 1,000, 5,000 and 20,000 calls a second (one group per ledgerGroupDelay):
// the difference is the write's fixed cost. At 400, one INSERT carries 256
// records, enough to spill a statement journal kept on disk.
func BenchmarkLedgerWrite(b *testing.B) {
	for _, bc := range []struct {
		calls bool
		group int
	}{{false, 20}, {true, 20}, {true, 100}, {true, 400}} {
		calls := bc.calls
		b.Run(fmt.Sprintf("calls=%v/group=%d", calls, bc.group), func(b *testing.B) {
			c, err := OpenSQLite(filepath.Join(b.TempDir(), "c.db"), Options{FlushInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			e := UsageEntry{Workspace: "acme", Route: "chat", Model: "gpt", KeyID: "k1", Requests: 1, InputTokens: 1000, OutputTokens: 200, CostMicros: 1500}
			// A record as the gateway writes one: its request id, the key's
			// 12-character id, every name filled in.
			r := CallRecord{RequestID: "req_0123456789abcdef", Org: "default", Workspace: "acme", KeyID: "abcdefgh2345", User: "alice", Route: "chat",
				Model: "gpt-4o-mini", Provider: "openai", Outcome: OutcomeReported, ReservedTokens: 1200, ReservedCost: 2400, InputTokens: 1000,
				OutputTokens: 200, CostMicros: 1500}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c.RecordUsage(e)
				if calls {
					c.RecordCall(r)
				}
				if i%bc.group == bc.group-1 {
					if err := c.Flush(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
