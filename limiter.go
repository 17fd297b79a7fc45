package sluice

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// Options configures a Limiter. Store is required; every other zero value is
// a documented default.
type Options struct {
	Store Store
	// Rules, Simple, Overrides and Tiers form the initial Policy. Simple
	// limits are checked together with Rules.
	Rules     []Rule
	Simple    Simple
	Overrides []Override
	Tiers     []Tier
	// Clock is nil for real time.
	Clock Clock
	// ServerID names this process for "server" subjects; empty means the
	// host name and process id.
	ServerID string
	// DefaultTimeout is the model deadline of a Request without one
	// (10 minutes).
	DefaultTimeout time.Duration
	// ExpirySlack is added to the model deadline before leases expire and
	// the sweep settles a reservation (30 seconds).
	ExpirySlack time.Duration
	// LeaseTimeout, when positive and the Store is a LeaseRenewer, is how
	// long a reservation outlives its Limiter: it is admitted with a
	// deadline LeaseTimeout ahead (never past the model deadline plus
	// ExpirySlack), and renewed every LeaseTimeout/3 while it is open, by
	// RunSweeper or RenewLeases. The concurrency places and budget
	// reservations of a process that died are then swept LeaseTimeout
	// after its last renewal, rather than at its calls' model deadline,
	// while a call that runs longer than LeaseTimeout keeps them. Zero, or
	// a store that cannot renew: every reservation's deadline is the
	// model deadline plus ExpirySlack.
	LeaseTimeout time.Duration
	// BusyRetryAfter caps the retry hint of a busy refusal (1 second).
	BusyRetryAfter time.Duration
	// RetryAfterBuffer is added to the hint (RetryAfter) of every rate and
	// busy refusal, so that a client retrying exactly when told, whose
	// timer fires a little early or whose retry races others for the same
	// refill, is not refused again. Zero adds nothing.
	RetryAfterBuffer time.Duration
	// OnOverrun, if set, is called when settlement finds usage above the
	// reservation. It must not block.
	OnOverrun func(Overrun)
	// OnSwept, if set, is called by Sweep for each reservation the sweep
	// settled, when the store can describe them (a SweepReporter), so
	// that what the sweep charged reaches a ledger. It must not block.
	OnSwept func(SweptReservation)
}

// Overrun is a settlement that charged more than was reserved.
type Overrun struct {
	Rule     string
	Subject  string
	Reserved int64
	Actual   int64
}

// Stats counts a Limiter's events since it was made.
type Stats struct {
	Admitted int64
	Refused  int64
	Overruns int64
	// FailedOpen counts admissions let through, uncharged, because the
	// store could not answer and every rule in play says
	// on_store_error: open.
	FailedOpen int64
}

// Limiter admits requests against a policy of rules held in a Store. It is
// safe for concurrent use.
type Limiter struct {
	store          Store
	clock          Clock
	serverID       string
	defaultTimeout time.Duration
	expirySlack    time.Duration
	busyRetryAfter time.Duration
	retryBuffer    time.Duration
	onOverrun      func(Overrun)
	onSwept        func(SweptReservation)

	// renewer is the store when it renews leases and LeaseTimeout is set,
	// else nil; leases are the reservations to renew.
	renewer      LeaseRenewer
	leaseTimeout time.Duration
	leases       heldLeases

	policy  atomic.Pointer[compiledPolicy]
	nextID  atomic.Uint64
	waiters waitQueues
	turns   turns
	// provided holds what the providers allow, for the rules that take
	// their limit from them.
	provided providerLimits

	admitted, refused, overruns, failedOpen atomic.Int64
}

// New returns a Limiter over opts.Store with the policy in opts.
func New(opts Options) (*Limiter, error) {
	if opts.Store == nil {
		return nil, errors.New("sluice: new: Options.Store is required")
	}
	l := &Limiter{
		store:          opts.Store,
		clock:          opts.Clock,
		serverID:       opts.ServerID,
		defaultTimeout: opts.DefaultTimeout,
		expirySlack:    opts.ExpirySlack,
		busyRetryAfter: opts.BusyRetryAfter,
		retryBuffer:    max(opts.RetryAfterBuffer, 0),
		onOverrun:      opts.OnOverrun,
		onSwept:        opts.OnSwept,
	}
	if l.clock == nil {
		l.clock = realClock{}
	}
	if l.serverID == "" {
		host, _ := os.Hostname()
		l.serverID = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if l.defaultTimeout <= 0 {
		l.defaultTimeout = 10 * time.Minute
	}
	if l.expirySlack <= 0 {
		l.expirySlack = 30 * time.Second
	}
	if l.busyRetryAfter <= 0 {
		l.busyRetryAfter = time.Second
	}
	if renewer, ok := opts.Store.(LeaseRenewer); ok && opts.LeaseTimeout > 0 {
		l.renewer, l.leaseTimeout = renewer, opts.LeaseTimeout
	}
	// Ids start at random, so that two Limiters over one shared store
	// (several gateways over Redis) do not hand out the same ones.
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	l.nextID.Store(binary.LittleEndian.Uint64(seed[:]) >> 1)
	rules := append(opts.Simple.Rules(), opts.Rules...)
	if err := l.SetPolicy(Policy{Rules: rules, Overrides: opts.Overrides, Tiers: opts.Tiers}); err != nil {
		return nil, err
	}
	return l, nil
}

// SetPolicy validates p and swaps it in atomically; the next admission uses
// it. An invalid policy is refused and the current one kept.
func (l *Limiter) SetPolicy(p Policy) error {
	cp, err := compilePolicy(p)
	if err != nil {
		return err
	}
	l.policy.Store(cp)
	return nil
}

// Policy returns the policy in force.
func (l *Limiter) Policy() Policy { return l.policy.Load().source }

// RuleOf returns the rule in force whose counters carry id
// (CounterKey.Rule), its Metric resolved ("" reads as requests); false
// when no rule in force does (one changed or removed since).
func (l *Limiter) RuleOf(id uint64) (Rule, bool) {
	for _, r := range l.policy.Load().rules {
		if r.id == id {
			rule := r.Rule
			rule.Metric = r.metric
			return rule, true
		}
	}
	return Rule{}, false
}

// Now returns the time by the Limiter's clock (Options.Clock).
func (l *Limiter) Now() time.Time { return l.clock.Now() }

// Stats returns the Limiter's counts.
func (l *Limiter) Stats() Stats {
	return Stats{Admitted: l.admitted.Load(), Refused: l.refused.Load(), Overruns: l.overruns.Load(), FailedOpen: l.failedOpen.Load()}
}

// Admit checks every applicable rule of req and charges all of them in one
// atomic step, or none. It returns a Reservation to settle when the call
// ends, or a refusal: *RateLimitError, *BusyError, *BudgetError,
// *TooLargeError, *StoreError, or the context's error. With req.MaxWait it
// may wait for rate and concurrency rules.
func (l *Limiter) Admit(ctx context.Context, req Request) (*Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Max.validate(); err != nil {
		return nil, err
	}
	if err := req.Expected.validate(); err != nil {
		return nil, err
	}
	r := &Reservation{l: l}
	r.batch.ID = l.nextID.Add(1)
	now := l.clock.Now()
	if err := l.build(l.policy.Load(), &req, now, r, true); err != nil {
		l.refused.Add(1)
		if tl, ok := err.(*TooLargeError); ok {
			tl.Result = l.tooLargeRoom(ctx, &req, now, tl.Rule)
		}
		return nil, err
	}
	if req.MaxWait > 0 && l.waiters.active() {
		if key, ok := l.waiters.existing(r.batch.Charges); ok {
			return l.wait(ctx, &req, r, key, now)
		}
	}
	err := l.try(ctx, &req, r, now)
	if err == nil {
		return r, nil
	}
	if req.MaxWait > 0 && waitable(err, req.MaxWait) {
		return l.wait(ctx, &req, r, decidingKey(r.batch.Charges), now)
	}
	l.refused.Add(1)
	return nil, err
}

// try runs one admission attempt at now.
func (l *Limiter) try(ctx context.Context, req *Request, r *Reservation, now time.Time) error {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = l.defaultTimeout
	}
	expiry := timeout + l.expirySlack
	if expiry < 0 {
		expiry = math.MaxInt64
	}
	r.until = now.Add(expiry)
	r.batch.Deadline = l.leaseDeadline(now, r.until)
	r.admittedAt = now
	if len(r.batch.Charges) == 0 {
		l.admitted.Add(1)
		return nil
	}
	if err := l.held(req, r.batch.Charges, now); err != nil {
		return err
	}
	var ok bool
	var err error
	if r.classes {
		ok, err = l.admitClasses(ctx, now, r)
	} else {
		ok, err = l.store.Admit(ctx, now, &r.batch)
	}
	if err != nil {
		if signal, ok := err.(*StoreError); ok {
			// The refusal's demand signal failed (see admitClasses).
			return signal
		}
		if !failOpen(r.batch.Charges) {
			return &StoreError{Op: "admit", Err: err}
		}
		// Every rule in play says on_store_error: open: admit, charge
		// nothing, and say so, naming the rules that let it through.
		for i := range r.batch.Charges {
			if c := &r.batch.Charges[i]; !c.Shadow {
				r.failedOpenRules = append(r.failedOpenRules, c.rule.Name)
			}
		}
		r.batch.Charges = r.batch.Charges[:0]
		r.failedOpen = true
		l.admitted.Add(1)
		l.failedOpen.Add(1)
		return nil
	}
	inZones(r.batch.Charges)
	if !ok {
		return l.refusal(r.batch.Charges, now)
	}
	if req.Turn != "" {
		l.turns.admitted(r.batch.Charges, req.Identity.Key, req.Turn, now)
	}
	l.hold(r)
	l.admitted.Add(1)
	return nil
}

// tooLargeRoom reads, without charging, the room of every rule that
// applies to req, for the header fields of a request that never fits rule:
// those of rule itself, which its body names (the OpenAI fields keep the
// least room among request and token rules); nil when the store does not
// answer (the refusal stands without them).
func (l *Limiter) tooLargeRoom(ctx context.Context, req *Request, now time.Time, rule string) *Result {
	r := &Reservation{l: l}
	if err := l.build(l.policy.Load(), req, now, r, false); err != nil || len(r.batch.Charges) == 0 {
		return nil
	}
	if err := l.peek(ctx, now, r); err != nil {
		return nil
	}
	res := resultOf(r.batch.Charges)
	for i := range r.batch.Charges {
		if c := &r.batch.Charges[i]; c.rule.Name == rule && !c.Shadow {
			res.Headroom = headroomOf(c)
			break
		}
	}
	if res.Rule == "" {
		return nil
	}
	return &res
}

// Room reads, without charging, the room of every rule that applies to req
// (its Max is neither charged nor checked): the Result to report in the
// header fields of an answer that admits nothing, such as a refusal an
// application or the gateway makes itself. The zero Result when no rule
// applies; a *StoreError when the store does not answer.
func (l *Limiter) Room(ctx context.Context, req Request) (Result, error) {
	return l.room(ctx, &req, l.clock.Now())
}

func (l *Limiter) room(ctx context.Context, req *Request, now time.Time) (Result, error) {
	r := &Reservation{l: l}
	if err := l.build(l.policy.Load(), req, now, r, false); err != nil || len(r.batch.Charges) == 0 {
		return Result{}, err
	}
	if err := l.peek(ctx, now, r); err != nil {
		return Result{}, err
	}
	return resultOf(r.batch.Charges), nil
}

// inZones puts each budget's ResetAt in its rule's time zone, as
// PeriodBounds gives it, whatever the store returned.
func inZones(charges []Charge) {
	for i := range charges {
		if c := &charges[i]; c.Kind == KindBudget && !c.ResetAt.IsZero() {
			c.ResetAt = c.ResetAt.In(c.rule.location)
		}
	}
}

// failOpen reports whether every enforced charge's rule admits when the
// store cannot answer.
func failOpen(charges []Charge) bool {
	for i := range charges {
		if c := &charges[i]; !c.Shadow && c.rule.OnStoreError != StoreErrorOpen {
			return false
		}
	}
	return true
}

// build sets r's charges: one per applicable rule and subject. Without
// checkFit, a charge too large for its rule is kept rather than refused
// (to look at a subject's limits).
func (l *Limiter) build(p *compiledPolicy, req *Request, now time.Time, r *Reservation, checkFit bool) error {
	charges := r.inline[:0]
	r.classes = false
	id := &req.Identity
	for _, i := range p.candidatesFor(id.Org) {
		rule := p.rules[i]
		if !rule.matches(id) {
			continue
		}
		limit, burst, source := p.effective(rule, id, now, &l.provided)
		if limit == 0 || rule.hasTag && len(id.Tags) == 0 || rule.hasSession && id.Session == "" ||
			req.CacheHit && rule.Kind == KindConcurrency {
			continue
		}
		if req.InFlight && rule.Kind == KindConcurrency {
			continue // its connection holds the lease
		}
		if checkFit && !req.usesMetric(rule) {
			continue
		}
		charges = append(charges, rule.charge)
		c := &charges[len(charges)-1]
		c.Limit, c.Burst, c.source = limit, burst, source
		if rule.amountOfRequest {
			// What the rule reserves: the bound, or the expected usage
			// with ReserveEstimate when the request gives one.
			u := &req.Max
			if rule.Reserve == ReserveEstimate && !req.Expected.IsZero() {
				u = &req.Expected
			}
			c.Amount = u.amountOf(rule.metric)
		}
		if req.CacheHit && rule.metric != MetricRequests {
			c.Amount = cacheHitAmount(rule, &req.Max)
		}
		most := c.BurstOrLimit()
		if rule.classes != nil {
			most = classCharge(c, id)
			r.classes = true
		}
		switch rule.Kind {
		case KindRate:
			if checkFit && !c.Shadow && c.Amount > most {
				return &TooLargeError{Rule: rule.Name, Subject: rule.Subject, Metric: rule.metric, Estimate: c.Amount, Limit: most, Source: source.name(rule)}
			}
		case KindBudget:
			if checkFit && !c.Shadow && c.Amount > limit {
				return &TooLargeError{Rule: rule.Name, Subject: rule.Subject, Metric: rule.metric, Estimate: c.Amount, Limit: limit, Source: source.name(rule)}
			}
			start, end := PeriodBounds(rule.Period, now, rule.location)
			c.Key.Period, c.PeriodEnd = start.Unix(), end
		}
		if !rule.hasTag {
			c.Key.Subject = subjectValue(rule, id, "", l.serverID)
			if req.Turn != "" && turnCounted(c) && l.turns.charged(c, id.Key, req.Turn, now) {
				c.Amount = 0
			}
			continue
		}
		// One charge per distinct tag.
		first := len(charges) - 1
		for i, tag := range id.Tags {
			if slices.Contains(id.Tags[:i], tag) {
				continue
			}
			if i > 0 {
				charges = append(charges, charges[first])
			}
			charges[len(charges)-1].Key.Subject = subjectValue(rule, id, tag, l.serverID)
		}
	}
	r.batch.Charges = charges
	return nil
}

// cacheHitAmount is what rule charges a cache hit replaying a call that
// used orig (see Rule.CacheHits).
func cacheHitAmount(rule *compiledRule, orig *Usage) int64 {
	switch rule.CacheHits {
	case CacheHitsNone:
		return 0
	case CacheHitsFull:
		return orig.amountOf(rule.metric)
	}
	return 1
}

func (r *compiledRule) matches(id *Identity) bool {
	m := &r.Match
	return (len(m.Models) == 0 || slices.Contains(m.Models, id.Model)) &&
		(len(m.Tiers) == 0 || slices.Contains(m.Tiers, id.Tier)) &&
		(len(m.Routes) == 0 || slices.Contains(m.Routes, id.Route))
}

// refusal builds the error for a refused admission decided at now: a
// budget wins over a rate; among rates and concurrency, the longest wait.
func (l *Limiter) refusal(charges []Charge, now time.Time) error {
	var budget, wait *Charge
	for i := range charges {
		c := &charges[i]
		if c.Allowed || c.Shadow {
			continue
		}
		if c.Kind == KindConcurrency {
			// A busy refusal's hint is capped, and its reset is when the
			// hint ends: the earliest lease's expiry (a call's deadline)
			// is no time to come back.
			hint := cmp.Or(c.rule.BusyRetryAfter, l.busyRetryAfter)
			if c.RetryAfter > hint {
				c.ResetAt = c.ResetAt.Add(hint - c.RetryAfter)
				c.RetryAfter = hint
			}
		}
		c.RetryAfter = ceilMillisecond(c.RetryAfter)
		if c.Kind != KindBudget {
			c.RetryAfter += l.retryBuffer
		}
		switch {
		case c.Kind == KindBudget:
			if budget == nil || c.ResetAt.After(budget.ResetAt) {
				budget = c
			}
		case wait == nil || c.RetryAfter > wait.RetryAfter:
			wait = c
		}
	}
	if budget == nil && wait == nil {
		return &StoreError{Op: "admit", Err: errors.New("store refused a batch without saying which charge")}
	}
	room := resultOf(charges)
	if budget != nil {
		return &BudgetError{refusalOf(budget, &room)}
	}
	ref := refusalOf(wait, &room)
	ref.RetryAt = now.Add(ref.RetryAfter)
	if wait.Kind == KindConcurrency {
		return &BusyError{ref}
	}
	return &RateLimitError{ref}
}

func refusalOf(c *Charge, room *Result) Refusal {
	rule := c.rule
	var class *ClassShare
	if c.class != 0 {
		class = shareOf(c)
	}
	return Refusal{Class: class,
		Rule: rule.Name, Subject: rule.Subject, Kind: rule.Kind, Metric: rule.metric,
		Limit: c.Limit, Used: c.Used, Remaining: c.Remaining, Requested: c.Amount,
		Window: rule.Window, Period: rule.Period, Source: c.source.name(rule),
		RetryAfter: c.RetryAfter, ResetAt: c.ResetAt, Result: room,
	}
}

// ceilMillisecond rounds d up to the next millisecond, never down.
func ceilMillisecond(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

// Sweep settles the reservations past their deadline (see Store.Sweep).
// Run it periodically, or use RunSweeper.
func (l *Limiter) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	var err error
	if r, ok := l.store.(SweepReporter); ok && l.onSwept != nil {
		var expired []Batch
		res, expired, err = r.SweepReport(ctx, l.clock.Now())
		for _, s := range sweptOf(l.policy.Load(), expired) {
			l.onSwept(s)
		}
	} else {
		res, err = l.store.Sweep(ctx, l.clock.Now())
	}
	if err != nil {
		return res, &StoreError{Op: "sweep", Err: err}
	}
	if res.Reservations > 0 {
		l.waiters.notify()
	}
	return res, nil
}

// RunSweeper calls Sweep every interval until ctx is done, and, with
// Options.LeaseTimeout, RenewLeases every LeaseTimeout/3 (from a goroutine
// of its own, so that a long sweep does not delay renewals). Errors are
// passed to onError when it is not nil.
func (l *Limiter) RunSweeper(ctx context.Context, interval time.Duration, onError func(error)) {
	if l.renewer != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.runRenewer(ctx, onError)
		}()
		defer func() { <-done }()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := l.Sweep(ctx); err != nil && onError != nil {
				onError(err)
			}
		}
	}
}
