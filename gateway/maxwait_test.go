package gateway_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// X-Sluice-Max-Wait asks to wait for rate and concurrency rules, never
// beyond the tier's bound (or the deployment's), and is refused 400 when it
// is not a number of seconds.
func TestGateway_MaxWaitHeader(t *testing.T) {
	refill := sluice.Rule{Name: "one_per_200ms", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: 200 * time.Millisecond}
	inTier := func(tier string, bound time.Duration) func(*gateway.Options) {
		return func(o *gateway.Options) {
			o.Keys = fakeKeys{testKey: {KeyID: "k1", Org: "o1", Workspace: "w1", User: "u1", Tier: tier}}
			o.BatchMaxWait = time.Hour
			o.TierMaxWait = map[string]time.Duration{tier: bound}
		}
	}
	call := func(h *harness, maxWait string) (reply, time.Duration) {
		start := time.Now()
		r := h.post("/v1/chat/completions", smallChat, map[string]string{gateway.HeaderMaxWait: maxWait})
		return r, time.Since(start)
	}

	t.Run("WaitsAsAsked", func(t *testing.T) {
		h := newHarness(t, []sluice.Rule{refill}, inTier("free", 5*time.Second))
		h.post("/v1/chat/completions", smallChat, nil)
		if r, took := call(h, "2.5"); r.status != 200 || took < 150*time.Millisecond {
			t.Fatalf("a call that may wait 2.5 s for a 200 ms refill: %d after %v: %s", r.status, took, r.body)
		}
	})
	t.Run("ZeroDoesNotWait", func(t *testing.T) {
		slow := sluice.Rule{Name: "one_per_minute", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute}
		h := newHarness(t, []sluice.Rule{slow}, inTier("free", 5*time.Second))
		h.post("/v1/chat/completions", smallChat, nil)
		if r, took := call(h, "0"); r.status != 429 || took > time.Second {
			t.Fatalf("a call that asked not to wait: %d after %v", r.status, took)
		}
	})
	t.Run("NeverBeyondTheTiersBound", func(t *testing.T) {
		slow := sluice.Rule{Name: "one_per_minute", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute}
		h := newHarness(t, []sluice.Rule{slow}, inTier("free", 50*time.Millisecond))
		h.post("/v1/chat/completions", smallChat, nil)
		if r, took := call(h, "3600"); r.status != 429 || took > 2*time.Second {
			t.Fatalf("a call asking an hour on a tier bounded at 50 ms: %d after %v", r.status, took)
		}
		// The tier's bound applies to X-Sluice-Priority: batch too.
		start := time.Now()
		r := h.post("/v1/chat/completions", smallChat, map[string]string{gateway.HeaderPriority: "batch"})
		if r.status != 429 || time.Since(start) > 2*time.Second {
			t.Fatalf("a batch call on a tier bounded at 50 ms: %d after %v", r.status, time.Since(start))
		}
	})
	t.Run("Malformed", func(t *testing.T) {
		h := newHarness(t, []sluice.Rule{refill})
		for _, v := range []string{"soon", "-1", "NaN", "+Inf", "1e400"} {
			r, _ := call(h, v)
			if r.status != 400 || !bytes.Contains(r.body, []byte("invalid_max_wait")) {
				t.Errorf("%s: %q: %d %s", gateway.HeaderMaxWait, v, r.status, r.body)
			}
		}
		if n := h.mockCalls(); n != 0 {
			t.Errorf("provider called %d times", n)
		}
	})
}

// A turn id that is not one short printable value is refused 400 (the
// six-step turn is TestGateway_TurnChargedOnceByRequestRules).
func TestGateway_TurnHeaderMalformed(t *testing.T) {
	h := newHarness(t, nil)
	body := `{"model":"mock-small","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	if r := h.post("/v1/chat/completions", body, map[string]string{gateway.HeaderTurn: strings.Repeat("t", 300)}); r.status != 400 || !bytes.Contains(r.body, []byte("invalid_turn")) {
		t.Fatalf("a turn id of 300 bytes: %d %s", r.status, r.body)
	}
	if n := h.mockCalls(); n != 0 {
		t.Errorf("provider called %d times", n)
	}
}
