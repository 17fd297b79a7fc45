package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestCatalog_UsageByKeyUserTeamTagAndKind(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		base := UsageEntry{Org: "acme", Workspace: "w", Route: "chat", Model: "gpt", At: day1, Requests: 1}
		add := func(key, user, team string, tags []string, in, out int64) {
			e := base
			e.KeyID, e.User, e.Team, e.Tags, e.InputTokens, e.OutputTokens, e.CostMicros = key, user, team, tags, in, out, in+out
			c.RecordUsage(e)
		}
		add("k1", "ann", "red", []string{"batch", "eval"}, 10, 20)
		add("k1", "ann", "red", []string{"eval", "batch", "eval"}, 1, 2) // the same tag set
		add("k2", "bob", "red", []string{"eval"}, 100, 200)
		add("k2", "bob", "blue", nil, 1000, 2000)
		swept := base
		swept.KeyID, swept.User, swept.Swept, swept.Tokens = "k2", "bob", true, 5000
		c.RecordUsage(swept)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		sums := func(rows []UsageRow) (out []struct {
			group          string
			requests, toks int64
		}) {
			for _, r := range rows {
				out = append(out, struct {
					group          string
					requests, toks int64
				}{r.Key + r.User + r.Team + r.Tag + r.Kind, r.Requests, r.Tokens})
			}
			return out
		}
		type want = struct {
			group          string
			requests, toks int64
		}
		for _, tc := range []struct {
			group string
			want  []want
		}{
			{"key", []want{{"k1", 2, 33}, {"k2", 3, 8300}}},
			{"user", []want{{"ann", 2, 33}, {"bob", 3, 8300}}},
			{"team", []want{{"", 1, 5000}, {"blue", 1, 3000}, {"red", 3, 333}}},
			// A call with two tags counts in both; untagged ones under "".
			{"tag", []want{{"", 2, 8000}, {"batch", 2, 33}, {"eval", 3, 333}}},
			{"kind", []want{{"settled", 4, 3333}, {"swept", 1, 5000}}},
		} {
			rows, err := c.Usage(ctx, UsageQuery{Org: "acme", GroupBy: []string{tc.group}})
			if err != nil {
				t.Fatal(err)
			}
			if got := sums(rows); !slices.Equal(got, tc.want) {
				t.Errorf("group_by %s: %+v, want %+v", tc.group, got, tc.want)
			}
		}
		// Tag rows keep the other groupings apart, in order.
		rows, err := c.Usage(ctx, UsageQuery{Org: "acme", GroupBy: []string{"key", "tag"}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.Key+"/"+r.Tag)
		}
		if want := []string{"k1/batch", "k1/eval", "k2/", "k2/eval"}; !slices.Equal(got, want) {
			t.Errorf("group_by key,tag: %v, want %v", got, want)
		}
		total, err := c.Usage(ctx, UsageQuery{Org: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if len(total) != 1 || total[0].Tokens != 8333 || total[0].SweptRequests != 1 || total[0].InputTokens != 1111 {
			t.Errorf("total %+v, want 8333 tokens, 1111 input, 1 swept", total)
		}
		if _, err := c.Usage(ctx, UsageQuery{GroupBy: []string{"prompt"}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("group_by prompt: %v, want ErrInvalid", err)
		}
	})
}

// TestCatalog_UsageOfOneKey: Key keeps one key's usage in every workspace
// it was charged to (a service key's, in those it asserts), and only its.
func TestCatalog_UsageOfOneKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for _, e := range []UsageEntry{
			{Org: "acme", Workspace: "w", KeyID: "svc", At: day1, Requests: 1, InputTokens: 10, CostMicros: 100},
			{Org: "acme", Workspace: "asserted", KeyID: "svc", At: day1, Requests: 1, InputTokens: 20, CostMicros: 200},
			{Org: "acme", Workspace: "w", KeyID: "svc", At: day2, Requests: 1, InputTokens: 40, CostMicros: 400},
			{Org: "acme", Workspace: "w", KeyID: "other", At: day1, Requests: 1, InputTokens: 1000, CostMicros: 9000},
		} {
			c.RecordUsage(e)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		rows, err := c.Usage(ctx, UsageQuery{Org: "acme", Key: "svc", GroupBy: []string{"day"}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%s %s %d %d", r.Key, r.Day, r.InputTokens, r.CostMicros))
		}
		want := []string{"svc " + day1.Format(dayLayout) + " 30 300", "svc " + day2.Format(dayLayout) + " 40 400"}
		if !slices.Equal(got, want) {
			t.Errorf("usage of key svc by day = %q, want %q", got, want)
		}
		rows, err = c.Usage(ctx, UsageQuery{Key: "svc", Workspace: "asserted"})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].InputTokens != 20 {
			t.Errorf("usage of key svc in workspace asserted = %+v, want 20 input tokens", rows)
		}
	})
}

func TestCatalog_CallRecords(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		start := clock.Now()
		for i, r := range []CallRecord{
			{RequestID: "r1", Org: "acme", Workspace: "w", KeyID: "k1", Model: "gpt", Provider: "azure-east", Route: "chat", Outcome: OutcomeReported,
				ReservedTokens: 100, InputTokens: 10, OutputTokens: 20, CostMicros: 30},
			{RequestID: "r2", Org: "acme", Workspace: "w", KeyID: "k2", Model: "claude", Route: "messages", Outcome: OutcomeEstimated, ReservedTokens: 50},
			{RequestID: "c1/1", Org: "acme", Workspace: "w", KeyID: "k1", Model: "gpt-realtime", Route: "realtime", Outcome: OutcomeReported,
				InputTokens: 40, OutputTokens: 30, AudioInputTokens: 25, AudioOutputTokens: 20, SessionID: "sess_1", ConnectionID: "c1"},
			{RequestID: "r3", Org: "beta", Workspace: "x", KeyID: "k3", Model: "gpt", Outcome: OutcomeCacheHit, CacheSavedMicros: 1234},
		} {
			r.At = start.Add(time.Duration(i) * time.Minute)
			c.RecordCall(r)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		ids := func(q CallQuery) []string {
			t.Helper()
			rs, err := c.Calls(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range rs {
				out = append(out, r.RequestID)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			q    CallQuery
			want []string
		}{
			{"all, newest first", CallQuery{}, []string{"r3", "c1/1", "r2", "r1"}},
			{"org", CallQuery{Org: "acme"}, []string{"c1/1", "r2", "r1"}},
			{"workspace", CallQuery{Workspace: "x"}, []string{"r3"}},
			{"key", CallQuery{KeyID: "k1"}, []string{"c1/1", "r1"}},
			{"model", CallQuery{Model: "gpt"}, []string{"r3", "r1"}},
			{"session", CallQuery{SessionID: "sess_1"}, []string{"c1/1"}},
			{"since", CallQuery{Since: start.Add(time.Minute)}, []string{"r3", "c1/1", "r2"}},
			{"until", CallQuery{Until: start.Add(time.Minute)}, []string{"r1"}},
			{"limit", CallQuery{Limit: 1}, []string{"r3"}},
		} {
			if got := ids(tc.q); !slices.Equal(got, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
		rs, err := c.Calls(ctx, CallQuery{Model: "gpt-realtime"})
		if err != nil {
			t.Fatal(err)
		}
		if r := rs[0]; r.SessionID != "sess_1" || r.ConnectionID != "c1" || r.AudioInputTokens != 25 || r.AudioOutputTokens != 20 {
			t.Errorf("live response's record %+v, want its session, connection and audio tokens", r)
		}
		rs, err = c.Calls(ctx, CallQuery{KeyID: "k1", Model: "gpt"})
		if err != nil {
			t.Fatal(err)
		}
		want := CallRecord{ID: rs[0].ID, At: start.UTC(), RequestID: "r1", Org: "acme", Workspace: "w", KeyID: "k1", Model: "gpt", Provider: "azure-east", Route: "chat",
			Outcome: OutcomeReported, ReservedTokens: 100, InputTokens: 10, OutputTokens: 20, CostMicros: 30}
		if !rs[0].At.Equal(want.At) {
			t.Errorf("at %v, want %v", rs[0].At, want.At)
		}
		rs[0].At = want.At
		if rs[0] != want {
			t.Errorf("record %+v\nwant   %+v", rs[0], want)
		}
		if hit, err := c.Calls(ctx, CallQuery{KeyID: "k3"}); err != nil || len(hit) != 1 || hit[0].Outcome != OutcomeCacheHit || hit[0].CacheSavedMicros != 1234 {
			t.Errorf("the cache hit's record %+v (%v), want outcome cache_hit and 1234 saved", hit, err)
		}
		for _, q := range []CallQuery{{Limit: -1}, {Limit: MaxCallLimit + 1}, {Since: start, Until: start}} {
			if _, err := c.Calls(ctx, q); !errors.Is(err, ErrInvalid) {
				t.Errorf("Calls(%+v): %v, want ErrInvalid", q, err)
			}
		}
		// Past the retention, the oldest go.
		n, err := c.PruneCalls(ctx, start.Add(DefaultCallRetention+150*time.Second))
		if err != nil || n != 3 {
			t.Fatalf("PruneCalls = %d, %v; want 3 deleted", n, err)
		}
		if got := ids(CallQuery{}); !slices.Equal(got, []string{"r3"}) {
			t.Errorf("after pruning: %v, want [r3]", got)
		}
	})
}

func TestCatalog_CallRecordsOff(t *testing.T) {
	c, err := OpenSQLite(t.TempDir()+"/c.db", Options{FlushInterval: -1, CallRetention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.RecordCall(CallRecord{Workspace: "w", Outcome: OutcomeReported})
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rs, err := c.Calls(context.Background(), CallQuery{}); err != nil || len(rs) != 0 {
		t.Fatalf("Calls = %v, %v; want none kept", rs, err)
	}
}

func TestCatalog_CallRecordsManyInOneFlush(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		// The second and third flushes reuse the statements the first
		// prepared, in other sizes and combinations.
		var n int64
		for _, batch := range []int{2*callsPerInsert + 3, 37, 1} {
			for range batch {
				c.RecordCall(CallRecord{Workspace: "w", Outcome: OutcomeReported, InputTokens: n})
				n++
			}
			if err := c.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			var count, sum int64
			if err := c.db.QueryRow(`SELECT COUNT(*), SUM(input_tokens) FROM call_records`).Scan(&count, &sum); err != nil {
				t.Fatal(err)
			}
			if count != n || sum != n*(n-1)/2 {
				t.Fatalf("%d records summing %d, want %d summing %d", count, sum, n, n*(n-1)/2)
			}
		}
		// 515 records went as 256+256+2+1, 37 as 32+4+1 and 1 as 1: one
		// statement prepared per size.
		if got := len(c.led.stmts); got != 5 {
			t.Errorf("%d statements prepared, want 5 (of 256, 32, 4, 2 and 1 rows)", got)
		}
	})
}

func TestCatalog_ManyLedgerRowsInOneFlush(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		const n = rowsPerUpsert + 7
		for round := range 2 { // the second adds to the rows of the first
			for i := range n {
				c.RecordUsage(UsageEntry{Workspace: "w", Route: "chat", Model: "m", KeyID: fmt.Sprint("k", i), Requests: 1, InputTokens: int64(i)})
			}
			if err := c.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			rows, err := c.Usage(context.Background(), UsageQuery{Workspace: "w", GroupBy: []string{"key"}})
			if err != nil {
				t.Fatal(err)
			}
			var requests, input int64
			for _, r := range rows {
				requests += r.Requests
				input += r.InputTokens
			}
			want := int64(round + 1)
			if len(rows) != n || requests != want*n || input != want*n*(n-1)/2 {
				t.Fatalf("round %d: %d rows, %d requests, %d input; want %d, %d, %d", round, len(rows), requests, input, n, want*n, want*n*(n-1)/2)
			}
		}
	})
}

// Calls answered from the response cache are ledger rows of their own
// kind: counted among the requests, with what they saved.
func TestCatalog_UsageCountsCacheHits(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		c.RecordUsage(UsageEntry{Workspace: "w", Model: "gpt", Requests: 1, InputTokens: 10, OutputTokens: 5, CostMicros: 300})
		for range 2 {
			c.RecordUsage(UsageEntry{Workspace: "w", Model: "gpt", Requests: 1, CacheHit: true, CacheSavedMicros: 300})
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		rows, err := c.Usage(ctx, UsageQuery{Workspace: "w"})
		if err != nil || len(rows) != 1 {
			t.Fatalf("usage %+v (%v)", rows, err)
		}
		if r := rows[0]; r.Requests != 3 || r.CacheHits != 2 || r.CacheSavedMicros != 600 || r.CostMicros != 300 {
			t.Fatalf("usage %+v, want 3 requests of which 2 hits that saved 600, and 300 spent", r)
		}
		rows, err = c.Usage(ctx, UsageQuery{Workspace: "w", GroupBy: []string{"kind"}})
		if err != nil || len(rows) != 2 || rows[0].Kind != "cache_hit" || rows[0].Requests != 2 || rows[1].Kind != "settled" {
			t.Fatalf("usage by kind %+v (%v), want a cache_hit row of 2 and a settled row", rows, err)
		}
	})
}
