package sluice

import (
	"cmp"
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
	l *Limiter
	// id and deadline are the batch's (see batch).
	id       uint64
	deadline time.Time
	// charges are the admission's, each with what the store found and
	// where it came from.
	charges charges
	// admittedAt is the admission's clock reading, which a settlement
	// without an overrun settles at: a bucket refunded as of then is as
	// full at any later time.
	admittedAt time.Time
	// expiry is, from admittedAt, the model deadline plus ExpirySlack: the
	// latest a renewal moves the reservation's deadline to.
	expiry time.Duration
	// failedOpenRules names the rules of an admission let through
	// uncharged (see failedOpen).
	failedOpenRules []string
	// The charges of most admissions.
	inline        [3]Charge
	inlineResults [3]ChargeResult
	inlineOrigins [3]origin

	mu sync.Mutex
	// renewed is the deadline the last renewal gave, when later than the
	// batch's own.
	renewed time.Time
	// settling is set while a settlement is with the store, settled once
	// it is done.
	settling, settled bool
	// uncertain is set when the store failed a settlement: it may have
	// applied it before failing (a reply lost on the way back).
	uncertain bool
	overrun   bool

	// Set at admission, not under mu: failedOpen marks an admission let
	// through uncharged (see Result.FailedOpen), classes one with a class
	// rule's charge (see hooks.admitClasses).
	failedOpen, classes bool
}

// charges are the charges of a batch as the Limiter holds them, in three
// slices of one length: what the store is asked, what it found, and where
// each charge came from.
type charges struct {
	in      []Charge
	out     []ChargeResult
	origins []origin
}

// origin is where a charge came from: its rule, and the limit's source.
type origin struct {
	rule   *compiledRule
	source limitSource
	// class and from are, for a charge of a class rule, the index+1 of the
	// request's class and of the class whose share it draws (0 for other
	// rules); capacity and burst are the rule's whole limit and burst.
	class, from     uint8
	capacity, burst int64
}

// charge is one charge of a batch, as the Limiter reads it.
type charge struct {
	*Charge
	*ChargeResult
	*origin
}

// at returns charge i; add and truncate leave it pointing at what it was.
func (cs *charges) at(i int) charge { return charge{&cs.in[i], &cs.out[i], &cs.origins[i]} }

// add appends a charge and returns it.
func (cs *charges) add(c Charge, o origin) charge {
	cs.in, cs.out, cs.origins = append(cs.in, c), append(cs.out, ChargeResult{}), append(cs.origins, o)
	return cs.at(len(cs.in) - 1)
}

// batch is what the store is given of r.
func (r *Reservation) batch() Batch {
	return Batch{ID: r.id, Deadline: r.deadline, Charges: r.charges.in}
}

// ID returns the reservation's identifier, unique per Limiter.
func (r *Reservation) ID() uint64 { return r.id }

// Deadline returns when the sweep may settle the reservation: its
// admission's deadline, or the last renewal's (Options.LeaseTimeout).
func (r *Reservation) Deadline() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.renewed.After(r.deadline) {
		return r.renewed
	}
	return r.deadline
}

// Result returns what the admission found: the rule with the least room,
// the budget warnings reached, the shadow rules that would have refused.
func (r *Reservation) Result() Result {
	res := resultOf(&r.charges)
	res.FailedOpen, res.FailedOpenRules = r.failedOpen, r.failedOpenRules
	return res
}

// Charges returns a copy of the reservation's charges, as the store was
// given them; Actual is what settlement charged, zero before.
func (r *Reservation) Charges() []Charge {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Charge(nil), r.charges.in...)
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
		return cmp.Or(r.settle(ctx, nil, false, nil), fmt.Errorf("settle: %w", invalid))
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
		_ = r.settle(ctx, nil, false, func(err error) { done(cmp.Or(err, fmt.Errorf("settle: %w", invalid))) })
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
		return r.end(store.Settle(ctx, now, r.batch()))
	}
	if as, ok := store.(AsyncSettler); ok {
		as.SettleAsync(ctx, now, r.batch(), func(err error) { done(r.end(err)) })
		return nil
	}
	go func() { done(r.end(store.Settle(ctx, now, r.batch()))) }()
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
	if len(r.charges.in) == 0 {
		r.settled = true
		return time.Time{}, false
	}
	r.settling = true
	reported := u != nil && !u.IsZero()
	r.overrun = false
	for i := range r.charges.in {
		c := r.charges.at(i)
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
	if overrun {
		for i := range r.charges.in {
			if c := r.charges.at(i); c.Actual > c.Amount && c.Kind != KindConcurrency {
				l.overruns.Add(1)
				if l.onOverrun != nil {
					l.onOverrun(Overrun{Rule: c.rule.Name, Subject: c.Key.Subject, Reserved: c.Amount, Actual: c.Actual})
				}
			}
		}
	}
	for _, settled := range l.hooks.settled {
		settled(r)
	}
	return nil
}
