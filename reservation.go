package sluice

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/inproc"
)

const (
	stateOpen uint32 = iota + 1
	stateSettling
	stateDone
)

// Result describes an admission, for the response headers.
type Result struct {
	// Rule is the applicable rule with the least room; empty when no rule
	// applied. Limit, Remaining and ResetAt are its figures.
	Rule      string
	Limit     int64
	Remaining int64
	ResetAt   time.Time
	// Warnings lists the budget thresholds and soft limits reached.
	Warnings []Warning
	// Shadowed names the shadow rules that would have refused.
	Shadowed []string
	// FailedOpen is set when the store could not answer and the request
	// was admitted uncharged, every rule in play saying
	// on_store_error: open.
	FailedOpen bool
}

// Warning is a budget past one of its warning thresholds or its soft limit.
type Warning struct {
	Rule    string
	Subject string
	// Threshold is the fraction of Limit reached; 0 for a soft limit.
	Threshold float64
	Soft      bool
	Used      int64
	Limit     int64
}

// Reservation is an admitted request. Settle it when the call ends, or
// Release it when the call never reached the model; settling twice charges
// once. It is safe for concurrent use.
type Reservation struct {
	// The pointers come first and are few: a Reservation is allocated on
	// every admission, and the collector scans no further than the last.
	limiter *Limiter
	// policy is the policy the charges were built from; a charge's
	// RuleIndex is its rule's place in policy.rules.
	policy *compiledPolicy
	// batch is the charges as a Batch, for a store that does not read
	// them in place; nil with an in-process store.
	batch *Batch
	adm   inproc.Admission
	// subject holds adm.Subjects when there is one.
	subject [1]string
	// admittedAt is the admission's clock reading (Unix ns), which a
	// settlement without an overrun can use instead of reading the clock
	// again.
	admittedAt int64
	state      atomic.Uint32
	// failedOpen marks an admission let through uncharged (see
	// Result.FailedOpen).
	failedOpen bool
	// uncertain is set when the store failed a settlement: it may have
	// applied it before failing (a reply lost on the way back).
	uncertain bool
	inline    [3]inproc.Charge
}

// ID returns the reservation's identifier, unique per Limiter.
func (r *Reservation) ID() uint64 { return r.adm.ID }

// Deadline returns when the sweep may settle the reservation.
func (r *Reservation) Deadline() time.Time { return time.Unix(0, r.adm.Deadline) }

// rule returns the rule of one of r's charges.
func (r *Reservation) rule(c *inproc.Charge) *compiledRule { return r.policy.rules[c.RuleIndex] }

// resetAt returns a charge's ResetAt as a time: a budget's in its rule's
// time zone, as PeriodBounds gives it.
func (r *Reservation) resetAt(c *inproc.Charge) time.Time {
	if c.ResetAt == 0 {
		return time.Time{}
	}
	t := time.Unix(0, c.ResetAt)
	if c.Kind == inproc.Budget {
		t = t.In(r.rule(c).location)
	}
	return t
}

// Result returns what the admission found. It is worked out from the
// charges when asked, so that an admission whose result nobody reads does
// not pay for it.
func (r *Reservation) Result() Result {
	res := Result{FailedOpen: r.failedOpen}
	var least *inproc.Charge
	var leastRoom float64
	for i := range r.adm.Charges {
		c := &r.adm.Charges[i]
		if c.Shadow {
			if !c.Allowed {
				res.Shadowed = append(res.Shadowed, r.rule(c).Name)
			}
			continue
		}
		capacity := c.Limit
		if c.Kind == inproc.Rate {
			capacity = c.Capacity()
		}
		room := float64(c.Remaining) / float64(capacity)
		if least == nil || room < leastRoom || room == leastRoom && c.ResetAt > least.ResetAt {
			least, leastRoom = c, room
		}
		if c.Kind == inproc.Budget {
			if w, ok := warningOf(r.rule(c), r.adm.SubjectOf(c), c); ok {
				res.Warnings = append(res.Warnings, w)
			}
		}
	}
	if least != nil {
		res.Rule = r.rule(least).Name
		res.Limit = least.Limit
		res.Remaining = least.Remaining
		res.ResetAt = r.resetAt(least)
	}
	return res
}

// Charges returns the reservation's charges (read-only).
func (r *Reservation) Charges() []Charge {
	if len(r.adm.Charges) == 0 {
		return nil
	}
	if r.batch != nil {
		return r.batch.Charges
	}
	b := r.toBatch()
	for i := range b.Charges {
		b.Charges[i].Actual = r.adm.Charges[i].Actual
	}
	return b.Charges
}

// toBatch returns r's charges as a Batch for a Store, with the results
// they hold, and keeps it as r.batch.
func (r *Reservation) toBatch() *Batch {
	b := &Batch{ID: r.adm.ID, Deadline: time.Unix(0, r.adm.Deadline), Charges: make([]Charge, len(r.adm.Charges))}
	for i := range r.adm.Charges {
		c, out := &r.adm.Charges[i], &b.Charges[i]
		rule := r.rule(c)
		out.Key = CounterKey{Rule: c.Rule, Subject: r.adm.SubjectOf(c), Period: c.Period}
		out.Kind, out.Limit, out.Burst, out.Window = rule.Kind, c.Limit, c.Burst, rule.Window
		out.Amount, out.OnExpiry, out.Shadow = c.Amount, rule.OnExpiry, c.Shadow
		out.source, out.rule = limitSource(c.Source), rule
		if c.Kind == inproc.Budget {
			out.PeriodEnd = time.Unix(0, c.PeriodEnd).In(rule.location)
		}
		out.Allowed, out.Remaining, out.Used = c.Allowed, c.Remaining, c.Used
		out.RetryAfter, out.ResetAt = time.Duration(c.RetryAfter), r.resetAt(c)
	}
	r.batch = b
	return b
}

// resultsFrom copies the results a Store filled in b to r's charges.
func (r *Reservation) resultsFrom(b *Batch) {
	for i := range r.adm.Charges {
		c, in := &r.adm.Charges[i], &b.Charges[i]
		c.Allowed, c.Remaining, c.Used, c.RetryAfter = in.Allowed, in.Remaining, in.Used, int64(in.RetryAfter)
		c.ResetAt = 0
		if !in.ResetAt.IsZero() {
			c.ResetAt = in.ResetAt.UnixNano()
		}
	}
}

// warningOf reports the highest warning a budget charge has reached.
func warningOf(rule *compiledRule, subject string, c *inproc.Charge) (Warning, bool) {
	w := Warning{Rule: rule.Name, Subject: subject, Used: c.Used, Limit: c.Limit}
	found := false
	for _, f := range rule.WarnAt {
		if float64(c.Used) >= f*float64(c.Limit) && f > w.Threshold {
			w.Threshold, found = f, true
		}
	}
	if rule.SoftLimit > 0 && c.Used >= rule.SoftLimit {
		w.Soft, found = true, true
	}
	return w, found
}

// Settle replaces each charge with the usage reported: a smaller usage is
// refunded, a larger one is charged in full and counted as an overrun. A
// zero Usage means nothing was reported, and the reservation is charged as
// it stands. Usage with negative amounts is refused and nothing is settled.
// Settling again does nothing. After a store error Settle (or Release) may
// be called again; as the failed call may have been applied before its
// reply was lost, the retry settles budgets and frees leases exactly once,
// and leaves rate buckets as they are (holding the reserved amount, or
// what the failed call made of it): never refunded or charged twice.
func (r *Reservation) Settle(ctx context.Context, u Usage) error {
	if err := u.validate(); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	return r.settle(ctx, &u, false)
}

// Release refunds every charge of a call that never reached the model.
// Releasing a settled reservation does nothing.
func (r *Reservation) Release(ctx context.Context) error {
	return r.settle(ctx, nil, true)
}

func (r *Reservation) settle(ctx context.Context, u *Usage, release bool) error {
	now, ok := r.beginSettle(u, release)
	if !ok {
		return nil
	}
	l := r.limiter
	if l.local != nil {
		return r.endSettle(l.local.SettleLocal(ctx, now, &r.adm))
	}
	r.copyActuals()
	return r.endSettle(l.store.Settle(ctx, time.Unix(0, now), r.batch))
}

// SettleAsync is Settle for a caller that must not wait for the store: it
// settles with u and calls done with what Settle would have returned, once
// the settlement is as durable as Settle's return would make it. Over a
// store in this process done runs before SettleAsync returns; a store that
// journals its settlements (an AsyncSettler) applies the settlement at once
// and calls done from its own goroutine after the commit; any other store
// is settled on a goroutine of its own. done must not block, nor call the
// store.
func (r *Reservation) SettleAsync(ctx context.Context, u Usage, done func(error)) {
	if err := u.validate(); err != nil {
		done(fmt.Errorf("settle: %w", err))
		return
	}
	now, ok := r.beginSettle(&u, false)
	if !ok {
		done(nil)
		return
	}
	l := r.limiter
	if l.local != nil {
		if as, ok := l.local.(localAsyncSettler); ok {
			as.SettleLocalAsync(now, &r.adm, func(err error) { done(r.endSettle(err)) })
			return
		}
		done(r.endSettle(l.local.SettleLocal(ctx, now, &r.adm)))
		return
	}
	r.copyActuals()
	at := time.Unix(0, now)
	if as, ok := l.store.(AsyncSettler); ok {
		as.SettleAsync(ctx, at, r.batch, func(err error) { done(r.endSettle(err)) })
		return
	}
	go func() { done(r.endSettle(l.store.Settle(ctx, at, r.batch))) }()
}

// beginSettle claims the reservation for a settlement and sets each
// charge's Actual; it returns the time to settle at, or false when there
// is nothing to settle (settled already, or no charges).
func (r *Reservation) beginSettle(u *Usage, release bool) (int64, bool) {
	if !r.state.CompareAndSwap(stateOpen, stateSettling) {
		return 0, false
	}
	l := r.limiter
	charges := r.adm.Charges
	if len(charges) == 0 {
		r.state.Store(stateDone)
		return 0, false
	}
	reported := u != nil && !u.IsZero()
	// Refunds need no fresh time: a bucket refunded below the admission
	// time is full at any later time too. An overrun draws from now.
	now, overrun := r.admittedAt, false
	for i := range charges {
		c := &charges[i]
		switch {
		case release:
			c.Actual = 0
		case !reported || c.Kind == inproc.Concurrency:
			c.Actual = c.Amount
		default:
			rule := r.rule(c)
			c.Actual = u.amountOf(rule.measure, rule.metric)
		}
		if r.uncertain && c.Kind == inproc.Rate {
			// A failed settlement may have moved the bucket already, and
			// moving it again would refund or charge twice: the bucket
			// keeps what it holds. Budgets are settled once by the store's
			// record of the reservation, and freeing a lease twice frees
			// it once.
			c.Actual = c.Amount
		}
		overrun = overrun || c.Actual > c.Amount
	}
	if overrun {
		now = l.clock.Now().UnixNano()
	}
	return now, true
}

// copyActuals copies each charge's Actual to the Batch the store admitted.
func (r *Reservation) copyActuals() {
	for i := range r.adm.Charges {
		r.batch.Charges[i].Actual = r.adm.Charges[i].Actual
	}
}

// endSettle finishes a settlement the store answered with err: on success
// it counts the overruns and marks the reservation settled; on failure the
// reservation is open again, for a retry.
func (r *Reservation) endSettle(err error) error {
	if err != nil {
		r.uncertain = true
		r.state.Store(stateOpen)
		return &StoreError{Op: "settle", Err: err}
	}
	l := r.limiter
	charges := r.adm.Charges
	for i := range charges {
		if c := &charges[i]; c.Actual > c.Amount && c.Kind != inproc.Concurrency {
			l.overruns.Add(1)
			if l.onOverrun != nil {
				l.onOverrun(Overrun{Rule: r.rule(c).Name, Subject: r.adm.SubjectOf(c), Reserved: c.Amount, Actual: c.Actual})
			}
		}
	}
	r.state.Store(stateDone)
	l.waiters.notify()
	return nil
}
