package gateway_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/store/memstore"
)

// flakySettles is a store whose next settlements fail, as during an outage.
type flakySettles struct {
	sluice.Store
	failures atomic.Int64
}

func (s *flakySettles) Settle(ctx context.Context, now time.Time, b sluice.Batch) error {
	if s.failures.Add(-1) >= 0 {
		return errors.New("connection refused")
	}
	return s.Store.Settle(ctx, now, b)
}

// A settlement the store fails is retried until it answers, backing off
// from SettleRetryBase (100 ms by default) and doubling, on the gateway's
// clock: the call's concurrency place comes back then, not at its
// deadline, and its budget is charged what it used, not its reservation.
func TestGateway_FailedSettlementIsRetried(t *testing.T) {
	t.Parallel()
	store := &flakySettles{Store: memstore.New(memstore.Options{})}
	store.failures.Store(3)
	one := sluice.Rule{Name: "one_at_a_time", Kind: sluice.KindConcurrency, Subject: "workspace", Limit: 1}
	clock := clocktest.New(time.Now())
	h := startHarness(t, setup{rules: []sluice.Rule{one, dailyTokens}, store: store, clock: clock})
	body := `{"model":"mock-small","max_tokens":1000,"messages":[{"role":"user","content":"hi [mock tokens=5]"}]}`
	if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
		t.Fatalf("first call %d %s", r.status, r.body)
	}
	eventually(t, "the call's place given back once the store answered again", func() bool { return h.used("one_at_a_time") == 0 })
	if store.failures.Load() >= 0 {
		t.Fatalf("the store failed only %d settlements of 3", 3-store.failures.Load())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if waits := clock.Waits(); !slices.Equal(waits, want) {
		t.Errorf("the gateway waited %v between settlements, want %v", waits, want)
	}
	if used := h.used("daily_tokens"); used >= 1000 {
		t.Fatalf("budget charged %d, want what the call used (under 1000), not its reservation", used)
	}
	if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
		t.Fatalf("second call %d %s", r.status, r.body)
	}
}
