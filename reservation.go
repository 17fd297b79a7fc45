package sluice

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Reservation is an admitted request. Settle it when the call ends, or
// Release it when the call never reached the model; settling twice, or
// from two goroutines at once, charges once. It is safe for concurrent use,
// and its ID, Deadline, Result and Charges stay readable after settlement.
// The zero Reservation settles and reads nothing.
type Reservation struct {
	l     *Limiter
	batch Batch
	// admittedAt is the admission's clock reading, which a settlement
	// without an overrun settles at: a bucket refunded as of then is as
	// full at any later time.
	admittedAt time.Time
	// until is the model deadline plus ExpirySlack: the latest a renewal
	// moves the reservation's deadline to.
	until time.Time
	// failedOpen marks an admission let through uncharged (see
	// Result.FailedOpen).
	failedOpen      bool
	failedOpenRules []string
	// classes is set when a charge is a class rule's (see admitClasses).
	classes bool
	// inline holds the charges of most admissions.
	inline [3]Charge

	mu sync.Mutex
	// settling is set while a settlement is with the store, settled once
	// it is done.
	settling, settled bool
	// uncertain is set when the store failed a settlement: it may have
	// applied it before failing (a reply lost on the way back).
	uncertain bool
	overrun   bool
	// renewed is the deadline the last renewal gave, when later than the
	// batch's own.
	renewed time.Time
}

// ID returns the reservation's identifier, unique per Limiter.
func (r *Reservation) ID() uint64 { return r.batch.ID }

// Deadline returns when the sweep may settle the reservation: its
// admission's deadline, or the last renewal's (Options.LeaseTimeout).
func (r *Reservation) Deadline() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.renewed.After(r.batch.Deadline) {
		return r.renewed
	}
	return r.batch.Deadline
}

// Result returns what the admission found: the rule with the least room,
// the budget warnings reached, the shadow rules that would have refused.
func (r *Reservation) Result() Result {
	res := resultOf(r.batch.Charges)
	res.FailedOpen, res.FailedOpenRules = r.failedOpen, r.failedOpenRules
	return res
}

// Charges returns a copy of the reservation's charges, each with its
// results; Actual is what settlement charged, zero before.
func (r *Reservation) Charges() []Charge {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Charge(nil), r.batch.Charges...)
}

// Settle replaces each charge with the usage reported: a smaller usage is
// refunded, a larger one is charged in full and counted as an overrun. A
// zero Usage means nothing was reported, and the reservation is charged as
// it stands. Usage no call could produce (an amount that is negative or
// above MaxTokens or MaxCost) is a provider's or caller's error and is not
// believed: the reservation is settled as if nothing were reported
// (charged what it reserved), and Settle returns an error matching
// ErrInvalidUsage that says which amount, once that settlement is done.
// Settling again does nothing. After a store error Settle (or Release) may
// be called again; as the failed call may have been applied before its
// reply was lost, the retry settles budgets and frees leases exactly once,
// and leaves rate buckets as they are (holding the reserved amount, or
// what the failed call made of it): never refunded or charged twice.
func (r *Reservation) Settle(ctx context.Context, u Usage) error {
	if invalid := u.validate(); invalid != nil {
		if err := r.settle(ctx, nil, false, nil); err != nil {
			return err
		}
		return fmt.Errorf("settle: %w", invalid)
	}
	return r.settle(ctx, &u, false, nil)
}

// Release refunds every charge of a call that never reached the model.
// Releasing a settled reservation does nothing.
func (r *Reservation) Release(ctx context.Context) error {
	return r.settle(ctx, nil, true, nil)
}

// SettleAsync is Settle for a caller that must not wait for the store: it
// settles with u and calls done with what Settle would have returned, once
// the settlement is as durable as Settle's return would make it. A store
// that is an AsyncSettler (memstore calls done before returning, a store
// that journals its settlements after the commit, from its own goroutine)
// is given the settlement; any other store is settled on a goroutine of its
// own. done must not block, nor call the store.
func (r *Reservation) SettleAsync(ctx context.Context, u Usage, done func(error)) {
	if invalid := u.validate(); invalid != nil {
		_ = r.settle(ctx, nil, false, func(err error) {
			if err == nil {
				err = fmt.Errorf("settle: %w", invalid)
			}
			done(err)
		})
		return
	}
	_ = r.settle(ctx, &u, false, done)
}

// settle settles r, or, with done, hands the settlement to the store and
// tells done.
func (r *Reservation) settle(ctx context.Context, u *Usage, release bool, done func(error)) error {
	now, ok := r.begin(u, release)
	if !ok {
		if done != nil {
			done(nil)
		}
		return nil
	}
	store := r.l.store
	if done == nil {
		return r.end(store.Settle(ctx, now, &r.batch))
	}
	if as, ok := store.(AsyncSettler); ok {
		as.SettleAsync(ctx, now, &r.batch, func(err error) { done(r.end(err)) })
		return nil
	}
	go func() { done(r.end(store.Settle(ctx, now, &r.batch))) }()
	return nil
}

// begin claims an open reservation for settlement and sets each charge's
// Actual; it returns the time to settle at, or false when there is nothing
// to settle: the reservation is settled, being settled, has no charges, or
// is the zero Reservation.
func (r *Reservation) begin(u *Usage, release bool) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.l == nil || r.settling || r.settled {
		return time.Time{}, false
	}
	if len(r.batch.Charges) == 0 {
		r.settled = true
		return time.Time{}, false
	}
	r.settling = true
	reported := u != nil && !u.IsZero()
	r.overrun = false
	for i := range r.batch.Charges {
		c := &r.batch.Charges[i]
		switch {
		case release:
			c.Actual = 0
		case !reported || c.Kind == KindConcurrency || c.rule.metric == MetricRequests:
			// A call is one request whatever it used (or none, for a later
			// call of a turn already counted).
			c.Actual = c.Amount
		default:
			c.Actual = u.amountOf(c.rule.metric)
		}
		if r.uncertain && c.Kind == KindRate {
			// A failed settlement may have moved the bucket already, and
			// moving it again would refund or charge twice: the bucket
			// keeps what it holds. Budgets are settled once by the store's
			// record of the reservation, and freeing a lease twice frees
			// it once.
			c.Actual = c.Amount
		}
		r.overrun = r.overrun || c.Actual > c.Amount
	}
	if r.overrun {
		// An overrun draws from now.
		return r.l.clock.Now(), true
	}
	return r.admittedAt, true
}

// end finishes a settlement the store answered with err: on success it
// counts the overruns; on failure the reservation is open again, for a
// retry.
func (r *Reservation) end(err error) error {
	r.mu.Lock()
	if err != nil {
		r.uncertain, r.settling = true, false
		r.mu.Unlock()
		return &StoreError{Op: "settle", Err: err}
	}
	r.settling, r.settled = false, true
	overrun := r.overrun
	r.mu.Unlock()
	l := r.l
	l.release(r)
	if overrun {
		for i := range r.batch.Charges {
			if c := &r.batch.Charges[i]; c.Actual > c.Amount && c.Kind != KindConcurrency {
				l.overruns.Add(1)
				if l.onOverrun != nil {
					l.onOverrun(Overrun{Rule: c.rule.Name, Subject: c.Key.Subject, Reserved: c.Amount, Actual: c.Actual})
				}
			}
		}
	}
	l.waiters.notify()
	return nil
}
