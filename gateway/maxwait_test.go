package gateway_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// X-Sluice-Max-Wait asks to wait for rate and concurrency rules, never
// beyond the tier's bound (or the deployment's), and is refused 400 when it
// is not a number of seconds. The gateway and its limiter run on a fake
// clock: what a call waited is read on it.
func TestGateway_MaxWaitHeader(t *testing.T) {
	t.Parallel()
	refill := sluice.Rule{Name: "one_per_200ms", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: 200 * time.Millisecond}
	inTier := func(tier string, bound time.Duration) func(*gateway.Options) {
		return func(o *gateway.Options) {
			o.Keys = fakeKeys{testKey: {KeyID: "k1", Org: "o1", Workspace: "w1", User: "u1", Tier: tier}}
			o.BatchMaxWait = time.Hour
			o.TierMaxWait = map[string]time.Duration{tier: bound}
		}
	}
	start := func(t *testing.T, rule sluice.Rule, tweak ...func(*gateway.Options)) (*harness, *clocktest.Clock) {
		clock := clocktest.New(time.Now())
		return startHarness(t, setup{rules: []sluice.Rule{rule}, clock: clock, tweak: tweak}), clock
	}
	// call sends a call that may wait maxWait and says how long it waited.
	call := func(h *harness, clock *clocktest.Clock, maxWait string, headers ...string) (reply, time.Duration) {
		before := len(clock.Waits())
		hs := map[string]string{gateway.HeaderMaxWait: maxWait}
		if maxWait == "" {
			hs = map[string]string{headers[0]: headers[1]}
		}
		r := h.post("/v1/chat/completions", smallChat, hs)
		var waited time.Duration
		for _, w := range clock.Waits()[before:] {
			waited += w
		}
		return r, waited
	}
	slow := sluice.Rule{Name: "one_per_minute", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute}

	t.Run("WaitsAsAsked", func(t *testing.T) {
		t.Parallel()
		h, clock := start(t, refill, inTier("free", 5*time.Second))
		h.post("/v1/chat/completions", smallChat, nil)
		if r, waited := call(h, clock, "2.5"); r.status != 200 || waited < 200*time.Millisecond || waited > 2500*time.Millisecond {
			t.Fatalf("a call that may wait 2.5 s for a 200 ms refill: %d after waiting %v: %s", r.status, waited, r.body)
		}
	})
	t.Run("ZeroDoesNotWait", func(t *testing.T) {
		t.Parallel()
		h, clock := start(t, slow, inTier("free", 5*time.Second))
		h.post("/v1/chat/completions", smallChat, nil)
		if r, waited := call(h, clock, "0"); r.status != 429 || waited != 0 {
			t.Fatalf("a call that asked not to wait: %d after waiting %v", r.status, waited)
		}
	})
	t.Run("NeverBeyondTheTiersBound", func(t *testing.T) {
		t.Parallel()
		h, clock := start(t, slow, inTier("free", 50*time.Millisecond))
		h.post("/v1/chat/completions", smallChat, nil)
		if r, waited := call(h, clock, "3600"); r.status != 429 || waited > 50*time.Millisecond {
			t.Fatalf("a call asking an hour on a tier bounded at 50 ms: %d after waiting %v", r.status, waited)
		}
		// The tier's bound applies to X-Sluice-Priority: batch too.
		if r, waited := call(h, clock, "", gateway.HeaderPriority, "batch"); r.status != 429 || waited > 50*time.Millisecond {
			t.Fatalf("a batch call on a tier bounded at 50 ms: %d after waiting %v", r.status, waited)
		}
	})
	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()
		h, clock := start(t, refill)
		for _, v := range []string{"soon", "-1", "NaN", "+Inf", "1e400"} {
			r, _ := call(h, clock, v)
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
	t.Parallel()
	h := newHarness(t, nil)
	body := `{"model":"mock-small","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	if r := h.post("/v1/chat/completions", body, map[string]string{gateway.HeaderTurn: strings.Repeat("t", 300)}); r.status != 400 || !bytes.Contains(r.body, []byte("invalid_turn")) {
		t.Fatalf("a turn id of 300 bytes: %d %s", r.status, r.body)
	}
	if n := h.mockCalls(); n != 0 {
		t.Errorf("provider called %d times", n)
	}
}

// A key's own max_wait bounds its wait: under a cap of one call in flight,
// held by a slow call, a batch call of a key with max_wait 200ms waits that
// long and is refused busy, naming the bound and its source, while a batch
// call of a key without one waits for the slot under the deployment's
// bound and is served.
func TestGateway_KeyMaxWaitBoundsItsWait(t *testing.T) {
	t.Parallel()
	oneAtATime := sluice.Rule{Name: "one_at_a_time", Kind: sluice.KindConcurrency, Subject: "global", Limit: 1}
	h := newHarness(t, []sluice.Rule{oneAtATime}, func(o *gateway.Options) {
		o.Keys = fakeKeys{
			testKey:    {KeyID: "holder", Org: "o1", Workspace: "w1", User: "u1"},
			"sk-short": {KeyID: "short", Org: "o1", Workspace: "w1", User: "u2", Tier: "free", MaxWait: 200 * time.Millisecond},
			"sk-long":  {KeyID: "long", Org: "o1", Workspace: "w1", User: "u3", Tier: "free"},
		}
		o.BatchMaxWait = 10 * time.Second
	})
	slow := `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hold the slot [mock delay=1500]"}]}`
	holderDone := make(chan time.Time, 1)
	go func() {
		h.post("/v1/chat/completions", slow, nil)
		holderDone <- time.Now()
	}()
	eventually(t, "the slow call holds the slot", func() bool { return h.usedBy(sluice.Identity{}, "one_at_a_time") == 1 })

	type answer struct {
		r        reply
		took     time.Duration
		at       time.Time
		whichKey string
	}
	answers := make(chan answer, 2)
	for _, key := range []string{"sk-short", "sk-long"} {
		go func() {
			start := time.Now()
			r := h.post("/v1/chat/completions", smallChat, map[string]string{"Authorization": "Bearer " + key, gateway.HeaderPriority: "batch"})
			answers <- answer{r: r, took: time.Since(start), at: time.Now(), whichKey: key}
		}()
	}
	got := map[string]answer{}
	for range 2 {
		a := <-answers
		got[a.whichKey] = a
	}
	held := <-holderDone

	short := got["sk-short"]
	if short.r.status != 429 {
		t.Fatalf("the key bounded at 200ms: %d %s", short.r.status, short.r.body)
	}
	e := openaiError(t, short.r)
	if deref(e.Error.Code) != "concurrency_limit_exceeded" || !strings.Contains(e.Error.Message, "This call could wait at most 200 milliseconds, set by its key's max_wait.") {
		t.Errorf("the key bounded at 200ms was refused with %s", short.r.body)
	}
	if short.took < 200*time.Millisecond || !short.at.Before(held) {
		t.Errorf("the key bounded at 200ms was refused after %v, at %v, the slot freed at %v: want a wait of 200ms, refused while the slot was held",
			short.took, short.at, held)
	}
	// The slot is freed when the server settles the slow call, before its
	// client has read the answer (held): the waiter may be served first, so
	// it is asked only to have waited well past the short key's bound.
	if long := got["sk-long"]; long.r.status != 200 || long.took < 500*time.Millisecond || !long.at.After(short.at) {
		t.Errorf("the key under the deployment's bound: %d after %v, at %v (the short key refused at %v): %s", long.r.status, long.took, long.at, short.at, long.r.body)
	}
}

// The refusal of a call that could wait names the bound and what set it:
// the key's max_wait, else its tier's, else the deployment's, or the
// client's X-Sluice-Max-Wait when it asked for less. A call that could not
// wait names none.
func TestGateway_WaitRefusalNamesItsBound(t *testing.T) {
	t.Parallel()
	perMinute := sluice.Rule{Name: "one_per_minute", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute}
	h := newHarness(t, []sluice.Rule{perMinute}, func(o *gateway.Options) {
		o.Keys = fakeKeys{
			"sk-own":  {KeyID: "own", Org: "o1", Workspace: "w1", User: "u1", Tier: "free", MaxWait: 200 * time.Millisecond},
			"sk-tier": {KeyID: "tier", Org: "o1", Workspace: "w1", User: "u2", Tier: "free"},
			"sk-none": {KeyID: "none", Org: "o1", Workspace: "w1", User: "u3"},
		}
		// Each bound is shorter than the rule's refill: every call below is
		// refused at once.
		o.BatchMaxWait = 30 * time.Second
		o.TierMaxWait = map[string]time.Duration{"free": 5 * time.Second}
	})
	for _, key := range []string{"sk-own", "sk-tier", "sk-none"} {
		if r := h.post("/v1/chat/completions", smallChat, map[string]string{"Authorization": "Bearer " + key}); r.status != 200 {
			t.Fatalf("%s's first call: %d %s", key, r.status, r.body)
		}
	}
	for _, tc := range []struct {
		key, header, value string
		says               string // empty: no bound named
	}{
		{"sk-own", gateway.HeaderPriority, "batch", "This call could wait at most 200 milliseconds, set by its key's max_wait."},
		{"sk-own", gateway.HeaderMaxWait, "3600", "This call could wait at most 200 milliseconds, set by its key's max_wait."},
		{"sk-own", gateway.HeaderMaxWait, "0.1", "This call could wait at most 100 milliseconds, set by its X-Sluice-Max-Wait header."},
		{"sk-tier", gateway.HeaderPriority, "batch", `This call could wait at most 5 seconds, set by the max_wait of its tier "free".`},
		{"sk-none", gateway.HeaderPriority, "batch", "This call could wait at most 30 seconds, set by the deployment's max_wait."},
		{"sk-own", gateway.HeaderMaxWait, "0", ""},
		{"sk-none", "", "", ""},
	} {
		headers := map[string]string{"Authorization": "Bearer " + tc.key}
		if tc.header != "" {
			headers[tc.header] = tc.value
		}
		r := h.post("/v1/chat/completions", smallChat, headers)
		e := openaiError(t, r)
		if r.status != 429 || deref(e.Error.Code) != "rate_limit_exceeded" {
			t.Fatalf("%s with %s: %s: %d %s", tc.key, tc.header, tc.value, r.status, r.body)
		}
		if tc.says == "" && strings.Contains(e.Error.Message, "could wait") || tc.says != "" && !strings.Contains(e.Error.Message, tc.says) {
			t.Errorf("%s with %s: %s: message %q, want %q", tc.key, tc.header, tc.value, e.Error.Message, tc.says)
		}
	}
}
