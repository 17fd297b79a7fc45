package sluice

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Result describes an admission, for the response headers.
type Result struct {
	// Headroom is the applicable rule with the least room (its Rule empty
	// when no rule applied): the X-RateLimit and RateLimit fields.
	Headroom
	// Warnings lists the budget thresholds and soft limits reached.
	Warnings []Warning
	// Shadowed names the shadow rules that would have refused.
	Shadowed []string
	// FailedOpen is set when the store could not answer and the request
	// was admitted uncharged, every rule in play saying
	// on_store_error: open.
	FailedOpen bool
	// FailedOpenRules names the enforced rules of a FailedOpen admission.
	FailedOpenRules []string
	// Classes describes the admission by each class rule: the request's
	// class, its floor and share, and whose share admitted it.
	Classes []ClassShare
	// Requests and Tokens are the applicable rules with the least room
	// among those counting requests, and those counting tokens (input,
	// output or both): what OpenAI's x-ratelimit-*-requests and
	// x-ratelimit-*-tokens headers report. Empty Rule when none applied.
	Requests, Tokens Headroom
}

// Headroom is one limit that applies to an identity: its rule, where its
// limit came from, and its room.
type Headroom struct {
	Rule    string
	Kind    Kind
	Subject string
	Metric  Metric
	Limit   int64
	Burst   int64
	// Source is where Limit came from: the rule's own Source, "tier",
	// "override" or LimitFromProvider.
	Source    string
	Mode      Mode
	Used      int64
	Remaining int64
	ResetAt   time.Time
	// Window is the rule's time window: a rate rule's refill window, the
	// length of a budget's current period; zero for concurrency.
	Window time.Duration
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
	// ResetAt is the end of the budget's period: a warning names its
	// period by it.
	ResetAt time.Time
}

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

// resultOf is what the charges of an admission, admitted or refused, say
// about its rules' room.
func resultOf(charges []Charge) Result {
	var res Result
	var least, leastRequests, leastTokens *Charge
	var leastRoom, requestsRoom, tokensRoom float64
	for i := range charges {
		c := &charges[i]
		if c.rule.isDemand {
			continue
		}
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
		switch c.rule.metric {
		case MetricRequests:
			if leastRequests == nil || room < requestsRoom {
				leastRequests, requestsRoom = c, room
			}
		case MetricTokens, MetricInputTokens, MetricUncachedInputTokens, MetricOutputTokens:
			if leastTokens == nil || room < tokensRoom {
				leastTokens, tokensRoom = c, room
			}
		}
		if c.class != 0 {
			res.Classes = append(res.Classes, *shareOf(c))
		}
		if c.Kind == KindBudget {
			if w, ok := warningOf(c); ok {
				res.Warnings = append(res.Warnings, w)
			}
		}
	}
	res.Headroom, res.Requests, res.Tokens = headroomOf(least), headroomOf(leastRequests), headroomOf(leastTokens)
	return res
}

func headroomOf(c *Charge) Headroom {
	if c == nil {
		return Headroom{}
	}
	rule := c.rule
	mode := rule.Mode
	if mode == "" {
		mode = ModeEnforce
	}
	return Headroom{Rule: rule.Name, Kind: c.Kind, Subject: rule.Subject, Metric: rule.metric, Limit: c.Limit, Burst: c.Burst,
		Source: c.source.name(rule), Mode: mode, Used: c.Used, Remaining: c.Remaining, ResetAt: c.ResetAt, Window: policyWindow(c)}
}

// Charges returns a copy of the reservation's charges, each with its
// results; Actual is what settlement charged, zero before.
func (r *Reservation) Charges() []Charge {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.batch.Charges) == 0 {
		return nil
	}
	return append([]Charge(nil), r.batch.Charges...)
}

// warningOf reports the highest warning a budget charge has reached.
func warningOf(c *Charge) (Warning, bool) {
	rule := c.rule
	w := Warning{Rule: rule.Name, Subject: c.Key.Subject, Used: c.Used, Limit: c.Limit, ResetAt: c.ResetAt}
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

// policyWindow is the time window of a charge's rule: a rate rule's refill
// window, a budget's current period (a month is as long as it is); none
// for concurrency.
func policyWindow(c *Charge) time.Duration {
	switch c.Kind {
	case KindRate:
		return c.Window
	case KindBudget:
		if !c.PeriodEnd.IsZero() {
			return c.PeriodEnd.Sub(time.Unix(c.Key.Period, 0))
		}
	}
	return 0
}
