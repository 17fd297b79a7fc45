package sluice

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
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
	limiter *Limiter
	batch   Batch
	inline  [3]Charge
	state   atomic.Uint32
	// failedOpen marks an admission let through uncharged (see
	// Result.FailedOpen).
	failedOpen bool
	// admittedAt is the admission's clock reading, which a settlement
	// without an overrun can use instead of reading the clock again.
	admittedAt time.Time
}

// ID returns the reservation's identifier, unique per Limiter.
func (r *Reservation) ID() uint64 { return r.batch.ID }

// Deadline returns when the sweep may settle the reservation.
func (r *Reservation) Deadline() time.Time { return r.batch.Deadline }

// Result returns what the admission found. It is worked out from the
// charges when asked, so that an admission whose result nobody reads does
// not pay for it.
func (r *Reservation) Result() Result {
	res := Result{FailedOpen: r.failedOpen}
	var least *Charge
	var leastRoom float64
	for i := range r.batch.Charges {
		c := &r.batch.Charges[i]
		if c.Shadow {
			if !c.Allowed {
				res.Shadowed = append(res.Shadowed, c.rule.Name)
			}
			continue
		}
		capacity := c.Limit
		if c.Kind == KindRate {
			capacity = c.BurstOrLimit()
		}
		room := float64(c.Remaining) / float64(capacity)
		if least == nil || room < leastRoom || room == leastRoom && c.ResetAt.After(least.ResetAt) {
			least, leastRoom = c, room
		}
		if c.Kind == KindBudget {
			if w, ok := warningOf(c); ok {
				res.Warnings = append(res.Warnings, w)
			}
		}
	}
	if least != nil {
		res.Rule = least.rule.Name
		res.Limit = least.Limit
		res.Remaining = least.Remaining
		res.ResetAt = least.ResetAt
	}
	return res
}

// Charges returns the reservation's charges (read-only).
func (r *Reservation) Charges() []Charge { return r.batch.Charges }

// warningOf reports the highest warning a budget charge has reached.
func warningOf(c *Charge) (Warning, bool) {
	w := Warning{Rule: c.rule.Name, Subject: c.Key.Subject, Used: c.Used, Limit: c.Limit}
	found := false
	for _, f := range c.rule.WarnAt {
		if float64(c.Used) >= f*float64(c.Limit) && f > w.Threshold {
			w.Threshold, found = f, true
		}
	}
	if c.rule.SoftLimit > 0 && c.Used >= c.rule.SoftLimit {
		w.Soft, found = true, true
	}
	return w, found
}

// Settle replaces each charge with the usage reported: a smaller usage is
// refunded, a larger one is charged in full and counted as an overrun. A
// zero Usage means nothing was reported, and the reservation is charged as
// it stands. Usage with negative amounts is refused and nothing is settled.
// Settling again does nothing.
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
	if !r.state.CompareAndSwap(stateOpen, stateSettling) {
		return nil
	}
	l := r.limiter
	if len(r.batch.Charges) == 0 {
		r.state.Store(stateDone)
		return nil
	}
	reported := u != nil && !u.IsZero()
	for i := range r.batch.Charges {
		c := &r.batch.Charges[i]
		switch {
		case release:
			c.Actual = 0
		case !reported || c.Kind == KindConcurrency:
			c.Actual = c.Amount
		default:
			c.Actual = u.amount(c.rule.metric)
		}
	}
	// Refunds need no fresh time: a bucket refunded below the admission
	// time is full at any later time too. An overrun draws from now.
	now := r.admittedAt
	for i := range r.batch.Charges {
		if c := &r.batch.Charges[i]; c.Actual > c.Amount {
			now = l.clock.Now()
			break
		}
	}
	if err := l.store.Settle(ctx, now, &r.batch); err != nil {
		r.state.Store(stateOpen)
		return &StoreError{Op: "settle", Err: err}
	}
	for i := range r.batch.Charges {
		if c := &r.batch.Charges[i]; c.Actual > c.Amount && c.Kind != KindConcurrency {
			l.overruns.Add(1)
			if l.onOverrun != nil {
				l.onOverrun(Overrun{Rule: c.rule.Name, Subject: c.Key.Subject, Reserved: c.Amount, Actual: c.Actual})
			}
		}
	}
	r.state.Store(stateDone)
	l.waiters.notify()
	return nil
}
