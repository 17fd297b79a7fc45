package sluice

import (
	"context"
	"sync"
	"time"
)

// installLeases makes a Limiter renew the leases of its reservations, when
// Options.LeaseTimeout is positive and the Store is a LeaseRenewer.
func installLeases(l *Limiter, opts *Options) {
	renewer, ok := opts.Store.(LeaseRenewer)
	if !ok || opts.LeaseTimeout <= 0 {
		return
	}
	h := &heldLeases{l: l, renewer: renewer, timeout: opts.LeaseTimeout}
	l.hooks.leaseDeadline, l.hooks.renewLeases, l.hooks.renewEvery = h.deadline, h.renew, h.renewEvery
	l.hooks.admitted = append(l.hooks.admitted, h.hold)
	l.hooks.settled = append(l.hooks.settled, h.release)
}

// heldLeases are the reservations a Limiter renews: admitted with a budget
// or concurrency charge (a store keeps nothing else of them), and neither
// settled nor past their model deadline.
type heldLeases struct {
	l       *Limiter
	renewer LeaseRenewer
	timeout time.Duration

	mu   sync.Mutex
	open map[*Reservation]struct{}
}

// deadline is the deadline of a reservation admitted at now whose call
// may last until until.
func (h *heldLeases) deadline(now, until time.Time) time.Time {
	if lease := now.Add(h.timeout); lease.Before(until) {
		return lease
	}
	return until
}

// hold starts renewing an admitted reservation, when it holds what a
// store renews.
func (h *heldLeases) hold(r *Reservation, _, _ string, _ time.Time) {
	for _, c := range r.charges.in {
		if k := c.Kind; k == KindBudget || k == KindConcurrency {
			h.mu.Lock()
			if h.open == nil {
				h.open = map[*Reservation]struct{}{}
			}
			h.open[r] = struct{}{}
			h.mu.Unlock()
			return
		}
	}
}

// release stops renewing a settled reservation.
func (h *heldLeases) release(r *Reservation) {
	h.mu.Lock()
	delete(h.open, r)
	h.mu.Unlock()
}

// renewChunk bounds the reservations renewed in one store call, so that a
// process with many calls in flight renews them within the store's
// timeout.
const renewChunk = 256

// RenewLeases renews every reservation this Limiter holds open to
// Options.LeaseTimeout from now, never past its model deadline plus
// ExpirySlack. RunSweeper calls it every LeaseTimeout/3; call it that often
// yourself when you do not run RunSweeper. A renewal that fails leaves the
// deadlines as they were, for the next one to move. Without LeaseTimeout,
// or over a store that is not a LeaseRenewer, it does nothing.
func (l *Limiter) RenewLeases(ctx context.Context) error {
	if l.hooks.renewLeases == nil {
		return nil
	}
	return l.hooks.renewLeases(ctx)
}

// renew is RenewLeases.
func (h *heldLeases) renew(ctx context.Context) error {
	now := h.l.clock.Now()
	var held []*Reservation
	var renewals []Batch
	h.mu.Lock()
	for r := range h.open {
		if !r.admittedAt.Add(r.expiry).After(now) {
			// Past its model deadline: the sweep settles it.
			delete(h.open, r)
			continue
		}
		held = append(held, r)
		// The admission's batch, at the deadline to renew it to.
		b := r.batch()
		b.Deadline = h.deadline(now, r.admittedAt.Add(r.expiry))
		renewals = append(renewals, b)
	}
	h.mu.Unlock()
	var failed error
	for start := 0; start < len(renewals); start += renewChunk {
		end := min(start+renewChunk, len(renewals))
		if err := h.renewer.RenewLeases(ctx, now, renewals[start:end]); err != nil {
			failed = &StoreError{Op: "renew leases", Err: err}
			continue
		}
		for i, r := range held[start:end] {
			r.mu.Lock()
			if d := renewals[start+i].Deadline; d.After(r.renewed) {
				r.renewed = d
			}
			r.mu.Unlock()
		}
	}
	return failed
}

// renewEvery calls RenewLeases every LeaseTimeout/3 of the Limiter's
// clock until ctx is done.
func (h *heldLeases) renewEvery(ctx context.Context, onError func(error)) {
	every := max(h.timeout/3, time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.l.clock.After(every):
			if err := h.renew(ctx); err != nil && onError != nil {
				onError(err)
			}
		}
	}
}
