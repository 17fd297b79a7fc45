package sluice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
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

// SweptReservation is a reservation the sweep charged at its deadline, as
// the Limiter's policy reads its counters: the attributes their subjects
// name and the amount its budgets were charged per metric.
type SweptReservation struct {
	// Identity holds the attributes the charges' subjects name (a
	// workspace, team, user or tag within its Org); the others are empty.
	// Tags holds the tag of a rule on "tag", when there is one.
	Identity Identity
	// Charged is, per metric, the largest amount a budget charge of that
	// metric was charged (every budget of a metric reserves the same
	// bound of the call, unless its rule reserves a fixed amount).
	Charged map[Metric]int64
	// Known reports whether a charge's rule was found in the policy:
	// a rule changed or removed since the admission leaves its charge
	// unread.
	Known bool
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
	hooks          hooks

	policy atomic.Pointer[compiledPolicy]
	nextID atomic.Uint64

	admitted, refused, overruns, failedOpen atomic.Int64
}

// hooks are where the optional features enter the core: a list is empty,
// and a function nil, while no feature in use needs it, which then costs
// the core a loop over nothing or a nil check. A hook takes no *Request,
// so that the request of an admission stays off the heap.
type hooks struct {
	// sweep is the store's Sweep, or what replaces it (sweep attribution).
	sweep func(ctx context.Context, now time.Time) (SweepResult, error)
	// charging may change charge c as build makes it, and admitted is
	// told of each reservation admitted with charges, for a request of key
	// (Identity.Key) in turn (Request.Turn) (turns, leases).
	charging []func(c charge, key, turn string, now time.Time)
	admitted []func(r *Reservation, key, turn string, now time.Time)
	// leaseDeadline is the deadline of a reservation admitted at now whose
	// call may last until until; renewLeases renews the leases of the
	// reservations held, and renewEvery does so until ctx is done (leases).
	leaseDeadline func(now, until time.Time) time.Time
	renewLeases   func(ctx context.Context) error
	renewEvery    func(ctx context.Context, onError func(error))
	// wait admits a request with a MaxWait (given by value); settled is
	// told of each reservation settled (waiting, leases), and swept of
	// each sweep that answered (waiting).
	wait    func(ctx context.Context, req Request, r *Reservation, now time.Time) (*Reservation, error)
	settled []func(r *Reservation)
	swept   []func(SweepResult)
	// providerLimit is the limit of rule r, whose LimitFrom is
	// LimitFromProvider, from what the provider of model allows, false when
	// it has not said; held refuses charges of a call to model while its
	// provider holds such calls; setProviderLimits records what the
	// provider of model allows (provider limits).
	providerLimit     func(r *compiledRule, model string) (int64, bool)
	held              func(cs *charges, model string, now time.Time) error
	setProviderLimits func(model string, p ProviderLimits)
	// admitClasses admits a reservation whose charges include a class
	// rule's, in place of the store's Admit: a failed demand signal is its
	// *StoreError (classes).
	admitClasses func(ctx context.Context, now time.Time, r *Reservation) (bool, error)
}

// New returns a Limiter over opts.Store with the policy in opts.
func New(opts Options) (*Limiter, error) {
	if opts.Store == nil {
		return nil, errors.New("sluice: new: Options.Store is required")
	}
	// A duration that is not positive takes its default.
	l := &Limiter{
		store:          opts.Store,
		clock:          cmp.Or(opts.Clock, Clock(realClock{})),
		serverID:       opts.ServerID,
		defaultTimeout: cmp.Or(max(opts.DefaultTimeout, 0), 10*time.Minute),
		expirySlack:    cmp.Or(max(opts.ExpirySlack, 0), 30*time.Second),
		busyRetryAfter: cmp.Or(max(opts.BusyRetryAfter, 0), time.Second),
		retryBuffer:    max(opts.RetryAfterBuffer, 0),
		onOverrun:      opts.OnOverrun,
		hooks:          hooks{sweep: opts.Store.Sweep},
	}
	if l.serverID == "" {
		host, _ := os.Hostname()
		l.serverID = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	// Ids start at random, so that two Limiters over one shared store
	// (several gateways over Redis) do not hand out the same ones.
	l.nextID.Store(rand.Uint64() >> 1)
	for _, install := range features { // features.go
		install(l, &opts)
	}
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

// Sweep settles the reservations past their deadline (see Store.Sweep).
// Run it periodically, or use RunSweeper.
func (l *Limiter) Sweep(ctx context.Context) (SweepResult, error) {
	res, err := l.hooks.sweep(ctx, l.clock.Now())
	if err != nil {
		return res, &StoreError{Op: "sweep", Err: err}
	}
	for _, swept := range l.hooks.swept {
		swept(res)
	}
	return res, nil
}

// RunSweeper calls Sweep every interval until ctx is done, and, with
// Options.LeaseTimeout, RenewLeases every LeaseTimeout/3 (from a goroutine
// of its own, so that a long sweep does not delay renewals). Errors are
// passed to onError when it is not nil.
func (l *Limiter) RunSweeper(ctx context.Context, interval time.Duration, onError func(error)) {
	var renewing sync.WaitGroup
	defer renewing.Wait()
	if l.hooks.renewEvery != nil {
		renewing.Go(func() { l.hooks.renewEvery(ctx, onError) })
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
