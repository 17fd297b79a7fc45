package gateway_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/sqlitestore"
)

// Through Server, over a store that journals settlements, the answer does
// not wait for the journal's commit, and the call is counted (ledger,
// Observer, budget) once it is committed: Drain waits for that.
func TestGateway_AnswerFirstSettleAfterCommit(t *testing.T) {
	t.Parallel()
	// Settlements held up to a second: the commit comes well after the answer.
	store, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(t.TempDir(), "s.db"),
		GroupDelay: time.Second, HoldSettlements: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	h := startHarness(t, setup{store: store, rules: []sluice.Rule{{Name: "daily_tokens", Kind: sluice.KindBudget,
		Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}}})
	start := time.Now()
	r := h.post("/v1/chat/completions", `{"model":"mock-small","messages":[{"role":"user","content":"hi [mock tokens=5]"}],"max_tokens":10}`, nil)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if took := time.Since(start); took > 800*time.Millisecond {
		t.Errorf("the answer took %v: it waited for the journal", took)
	}
	if n := len(h.rec.usage()); n != 0 {
		t.Errorf("%d ledger records before the settlement was committed, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.gw.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	recs := h.rec.usage()
	if len(recs) != 1 || recs[0].OutputTokens != 5 {
		t.Fatalf("after Drain, ledger %+v, want one record of 5 output tokens", recs)
	}
	if got := h.used("daily_tokens"); got != recs[0].InputTokens+5 {
		t.Errorf("budget %d after Drain, want %d", got, recs[0].InputTokens+5)
	}
	if ev := h.rec.waitEvents(t, 1); ev[0].Outcome != "admitted" || ev[0].Usage.OutputTokens != 5 {
		t.Errorf("event %+v, want admitted with 5 output tokens", ev[0])
	}
}
