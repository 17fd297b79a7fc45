package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func inFlight(limit int64) sluice.Rule {
	return sluice.Rule{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: limit}
}

var concurrencyScenarios = map[string]func(t *testing.T, h *Harness){
	"ConcurrencyCapNeverExceeded": func(t *testing.T, h *Harness) {
		l := h.Limiter(inFlight(4))
		var held, most atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 20 {
					r, err := l.Admit(h.Ctx, Key("k"))
					if err != nil {
						if !errors.Is(err, sluice.ErrBusy) {
							t.Errorf("admit: %v", err)
						}
						continue
					}
					n := held.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					held.Add(-1)
					if err := r.Settle(h.Ctx, sluice.Usage{}); err != nil {
						t.Errorf("settle: %v", err)
					}
				}
			})
		}
		wg.Wait()
		if m := most.Load(); m > 4 || m < 1 {
			t.Fatalf("most held at once %d, want 1..4", m)
		}
		if got := h.Hammer(l, Key("k"), 16, 1); len(got) != 4 {
			t.Fatalf("after every settle, %d of 16 admitted, want 4", len(got))
		}
	},
	"ConcurrencyBusyRetryAfter": func(t *testing.T, h *Harness) {
		l := h.Limiter(inFlight(1))
		r := h.Admit(l, Key("k"))
		err := h.Refuse(l, Key("k"), sluice.ErrBusy)
		var busy *sluice.BusyError
		if !errors.As(err, &busy) || busy.RetryAfter != time.Second || busy.Limit != 1 {
			t.Fatalf("got %#v, want busy with retry after 1s", err)
		}
		// The reset is when the hint ends, not the lease's expiry.
		if d := busy.ResetAt.Sub(h.Clock.Now()); d > time.Second+50*time.Millisecond || d < time.Second-50*time.Millisecond {
			t.Fatalf("busy resets in %v, want with its 1s hint", d)
		}
		h.Settle(r, sluice.Usage{})
		h.Admit(l, Key("k"))
		// A rule's own hint.
		slow := inFlight(1)
		slow.Name, slow.BusyRetryAfter = "slow_in_flight", 5*time.Second
		l2 := h.Limiter(slow)
		h.Admit(l2, Key("k2"))
		if err := h.Refuse(l2, Key("k2"), sluice.ErrBusy); !errors.As(err, &busy) || busy.RetryAfter != 5*time.Second {
			t.Fatalf("got %#v, want the rule's 5s hint", err)
		}
	},
	"ConcurrencyLeaseExpiryFreesSlot": func(t *testing.T, h *Harness) {
		l := h.Limiter(inFlight(2))
		h.Admit(l, Key("k"))
		h.Admit(l, Key("k"))
		h.Refuse(l, Key("k"), sluice.ErrBusy)
		h.Clock.Advance(89 * time.Second)
		h.Refuse(l, Key("k"), sluice.ErrBusy)
		h.Clock.Advance(time.Second) // one minute timeout + 30s slack
		h.Admit(l, Key("k"))
		h.Admit(l, Key("k"))
		h.Refuse(l, Key("k"), sluice.ErrBusy)
	},
	"ConcurrencyReleaseFreesSlot": func(t *testing.T, h *Harness) {
		l := h.Limiter(inFlight(1))
		r := h.Admit(l, Key("k"))
		if err := r.Release(h.Ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Release(h.Ctx); err != nil {
			t.Fatal(err)
		}
		h.Admit(l, Key("k"))
		h.Refuse(l, Key("k"), sluice.ErrBusy)
	},
}
