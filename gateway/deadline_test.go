package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// slowKeys is a key store that takes delay to answer on clock (nil: real
// time), or until the lookup's context ends.
type slowKeys struct {
	fakeKeys
	delay time.Duration
	clock gateway.Clock
}

func (k slowKeys) Authenticate(ctx context.Context, secret string) (gateway.Principal, error) {
	after := time.After
	if k.clock != nil {
		after = k.clock.After
	}
	select {
	case <-after(k.delay):
		return k.fakeKeys.Authenticate(ctx, secret)
	case <-ctx.Done():
		return gateway.Principal{}, ctx.Err()
	}
}

// A stalled key store is answered 503 key_store_unavailable after
// CatalogTimeout, not after the stall.
func TestGateway_KeyLookupIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens}, func(o *gateway.Options) {
		o.Keys = slowKeys{fakeKeys: o.Keys.(fakeKeys), delay: time.Minute}
		o.CatalogTimeout = 100 * time.Millisecond
	})
	start := time.Now()
	r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if took := time.Since(start); r.status != 503 || !strings.Contains(string(r.body), "key_store_unavailable") || took > 5*time.Second {
		t.Fatalf("%d %s after %v, want 503 key_store_unavailable after about 100ms", r.status, r.body, took)
	}
	if n := h.mockCalls(); n != 0 {
		t.Fatalf("the provider was called %d times", n)
	}
}

// A call whose deadline passed while it waited, before it reached the
// provider, is released, not charged, and told so. The key store's wait is
// on the gateway's clock.
func TestGateway_CallPastItsDeadlineIsReleased(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Now())
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, clock: clock, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Keys = slowKeys{fakeKeys: o.Keys.(fakeKeys), delay: 300 * time.Millisecond, clock: clock}
		o.CatalogTimeout = 5 * time.Second
		o.RequestTimeout = 200 * time.Millisecond
	}}})
	r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 503 || !strings.Contains(string(r.body), "deadline_passed") {
		t.Fatalf("%d %s, want 503 deadline_passed", r.status, r.body)
	}
	if n := h.mockCalls(); n != 0 {
		t.Fatalf("the provider was called %d times", n)
	}
	if used := h.used("daily_tokens"); used != 0 {
		t.Fatalf("budget charged %d for a call never sent, want 0", used)
	}
}
