// Package storetest is the conformance suite every sluice.Store passes. A
// store's own test calls Run with a function that returns a fresh, empty
// store; the suite drives time through a settable Clock.
package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// NewStore returns a fresh, empty store for one test. The test closes it.
type NewStore func(t *testing.T) sluice.Store

// Start is the time every scenario begins at: a Wednesday, in UTC.
var Start = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

// Run runs every scenario of the suite against stores from newStore.
func Run(t *testing.T, newStore NewStore) {
	groups := []map[string]func(t *testing.T, h *Harness){rateScenarios, budgetScenarios, concurrencyScenarios, engineScenarios, tenancyScenarios,
		reservedScenarios, reservationScenarios, propertyScenarios, sweepReportScenarios, classScenarios, leaseScenarios}
	for _, group := range groups {
		for name, fn := range group {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				fn(t, newHarness(t, newStore))
			})
		}
	}
}

// Harness is one scenario's store, clock and context.
type Harness struct {
	T     *testing.T
	Store sluice.Store
	Clock *Clock
	Ctx   context.Context
}

func newHarness(t *testing.T, newStore NewStore) *Harness {
	s := newStore(t)
	t.Cleanup(func() { _ = s.Close() })
	return &Harness{T: t, Store: s, Clock: NewClock(Start), Ctx: context.Background()}
}

// Limiter returns a Limiter over the harness's store and clock.
func (h *Harness) Limiter(rules ...sluice.Rule) *sluice.Limiter {
	h.T.Helper()
	l, err := sluice.New(sluice.Options{Store: h.Store, Clock: h.Clock, Rules: rules, ServerID: "test-server",
		DefaultTimeout: time.Minute, ExpirySlack: 30 * time.Second})
	if err != nil {
		h.T.Fatalf("new limiter: %v", err)
	}
	return l
}

// Admit admits req or fails the test.
func (h *Harness) Admit(l *sluice.Limiter, req sluice.Request) *sluice.Reservation {
	h.T.Helper()
	r, err := l.Admit(h.Ctx, req)
	if err != nil {
		h.T.Fatalf("admit: %v", err)
	}
	return r
}

// Refuse expects req to be refused with an error matching target.
func (h *Harness) Refuse(l *sluice.Limiter, req sluice.Request, target error) error {
	h.T.Helper()
	r, err := l.Admit(h.Ctx, req)
	if err == nil {
		_ = r.Release(h.Ctx)
		h.T.Fatalf("admit: admitted, want %v", target)
	}
	if !errors.Is(err, target) {
		h.T.Fatalf("admit: got %v, want %v", err, target)
	}
	return err
}

// Settle settles r with u or fails the test.
func (h *Harness) Settle(r *sluice.Reservation, u sluice.Usage) {
	h.T.Helper()
	if err := r.Settle(h.Ctx, u); err != nil {
		h.T.Fatalf("settle: %v", err)
	}
}

// Used returns the usage counted against rule for id.
func (h *Harness) Used(l *sluice.Limiter, id sluice.Identity, rule string) (used, remaining int64) {
	h.T.Helper()
	eff, err := l.Effective(h.Ctx, id)
	if err != nil {
		h.T.Fatalf("effective: %v", err)
	}
	for _, e := range eff {
		if e.Rule == rule {
			return e.Used, e.Remaining
		}
	}
	h.T.Fatalf("effective: no rule %q in %+v", rule, eff)
	return 0, 0
}

// Hammer runs attempts admissions of req from workers goroutines at once
// and returns the reservations admitted.
func (h *Harness) Hammer(l *sluice.Limiter, req sluice.Request, workers, attempts int) []*sluice.Reservation {
	h.T.Helper()
	var (
		mu       sync.Mutex
		admitted []*sluice.Reservation
		failed   atomic.Value
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	for range workers {
		wg.Go(func() {
			<-start
			for range attempts {
				r, err := l.Admit(h.Ctx, req)
				switch {
				case err == nil:
					mu.Lock()
					admitted = append(admitted, r)
					mu.Unlock()
				case errors.Is(err, sluice.ErrRateLimited), errors.Is(err, sluice.ErrBusy), errors.Is(err, sluice.ErrBudgetExhausted):
				default:
					failed.Store(err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		h.T.Fatalf("hammer: unexpected error %v", err)
	}
	return admitted
}

// Key is a request with no cost for API key k.
func Key(k string) sluice.Request {
	return sluice.Request{Identity: sluice.Identity{Key: k, Workspace: "ws", User: "u"}}
}

// Tokens is a request for API key k bounded by in input and out output
// tokens.
func Tokens(k string, in, out int64) sluice.Request {
	r := Key(k)
	r.Max = sluice.Usage{InputTokens: in, OutputTokens: out}
	return r
}
