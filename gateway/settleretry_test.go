package gateway_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/store/memstore"
)

// flakySettles is a store whose next settlements fail, as during an outage.
type flakySettles struct {
	sluice.Store
	failures atomic.Int64
}

func (s *flakySettles) Settle(ctx context.Context, now time.Time, b *sluice.Batch) error {
	if s.failures.Add(-1) >= 0 {
		return errors.New("connection refused")
	}
	return s.Store.Settle(ctx, now, b)
}

// A settlement the store fails is retried until it answers: the call's
// concurrency place comes back then, not at its deadline, and its budget
// is charged what it used, not its reservation.
func TestGateway_FailedSettlementIsRetried(t *testing.T) {
	t.Parallel()
	store := &flakySettles{Store: memstore.New(memstore.Options{})}
	store.failures.Store(3)
	one := sluice.Rule{Name: "one_at_a_time", Kind: sluice.KindConcurrency, Subject: "workspace", Limit: 1}
	h := startHarness(t, setup{rules: []sluice.Rule{one, dailyTokens}, store: store,
		tweak: []func(*gateway.Options){func(o *gateway.Options) { o.SettleRetryBase = 10 * time.Millisecond }}})
	body := `{"model":"mock-small","max_tokens":1000,"messages":[{"role":"user","content":"hi [mock tokens=5]"}]}`
	if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
		t.Fatalf("first call %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.used("one_at_a_time") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call's place was not given back once the store answered again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if store.failures.Load() >= 0 {
		t.Fatalf("the store failed only %d settlements of 3", 3-store.failures.Load())
	}
	if used := h.used("daily_tokens"); used >= 1000 {
		t.Fatalf("budget charged %d, want what the call used (under 1000), not its reservation", used)
	}
	if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
		t.Fatalf("second call %d %s", r.status, r.body)
	}
}
