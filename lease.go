package sluice

import (
	"context"
	"sync"
	"time"
)

// heldLeases are the reservations a Limiter renews: admitted with a budget
// or concurrency charge (a store keeps nothing else of them), and neither
// settled nor past their model deadline.
type heldLeases struct {
	mu   sync.Mutex
	open map[*Reservation]struct{}
}

// leaseDeadline is the deadline of a reservation admitted at now whose call
// may last until until.
func (l *Limiter) leaseDeadline(now, until time.Time) time.Time {
	if l.renewer == nil {
		return until
	}
	if lease := now.Add(l.leaseTimeout); lease.Before(until) {
		return lease
	}
	return until
}

// hold starts renewing an admitted reservation, when it holds what a
// store renews.
func (l *Limiter) hold(r *Reservation) {
	if l.renewer == nil {
		return
	}
	for _, c := range r.charges.in {
		if k := c.Kind; k == KindBudget || k == KindConcurrency {
			l.leases.mu.Lock()
			if l.leases.open == nil {
				l.leases.open = map[*Reservation]struct{}{}
			}
			l.leases.open[r] = struct{}{}
			l.leases.mu.Unlock()
			return
		}
	}
}

// release stops renewing a settled reservation.
func (l *Limiter) release(r *Reservation) {
	if l.renewer == nil {
		return
	}
	l.leases.mu.Lock()
	delete(l.leases.open, r)
	l.leases.mu.Unlock()
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
	if l.renewer == nil {
		return nil
	}
	now := l.clock.Now()
	var held []*Reservation
	var renewals []Batch
	l.leases.mu.Lock()
	for r := range l.leases.open {
		if !r.admittedAt.Add(r.expiry).After(now) {
			// Past its model deadline: the sweep settles it.
			delete(l.leases.open, r)
			continue
		}
		held = append(held, r)
		// The admission's batch, at the deadline to renew it to.
		b := r.batch()
		b.Deadline = l.leaseDeadline(now, r.admittedAt.Add(r.expiry))
		renewals = append(renewals, b)
	}
	l.leases.mu.Unlock()
	var failed error
	for start := 0; start < len(renewals); start += renewChunk {
		end := min(start+renewChunk, len(renewals))
		if err := l.renewer.RenewLeases(ctx, now, renewals[start:end]); err != nil {
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

// runRenewer calls RenewLeases every LeaseTimeout/3 of the Limiter's
// clock until ctx is done.
func (l *Limiter) runRenewer(ctx context.Context, onError func(error)) {
	every := max(l.leaseTimeout/3, time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.clock.After(every):
			if err := l.RenewLeases(ctx); err != nil && onError != nil {
				onError(err)
			}
		}
	}
}
