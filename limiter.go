package sluice

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/inproc"
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
	// BusyRetryAfter caps the retry hint of a busy refusal (1 second).
	BusyRetryAfter time.Duration
	// OnOverrun, if set, is called when settlement finds usage above the
	// reservation. It must not block.
	OnOverrun func(Overrun)
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
	store Store
	// local is store when it keeps its counters in this process and reads
	// the engine's charges in place (memstore); nil otherwise.
	local localStore
	clock Clock
	// real is clock when it is real time (Options.Clock nil), read
	// without an interface call or a time.Time.
	real           *realClock
	serverID       string
	defaultTimeout time.Duration
	expirySlack    time.Duration
	busyRetryAfter time.Duration
	onOverrun      func(Overrun)

	policy atomic.Pointer[compiledPolicy]
	ids    idSource
	// states are admissions' states not in use (see resState).
	states  sync.Pool
	waiters waitQueues

	admitted                      stripedCounter
	refused, overruns, failedOpen atomic.Int64
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
		onOverrun:      opts.OnOverrun,
	}
	if ls, ok := opts.Store.(localStore); ok && ls.LocalStore() == opts.Store {
		l.local = ls
	}
	if l.clock == nil {
		l.real = newRealClock()
		l.clock = l.real
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
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	// Blocks of ids start at a multiple of idBlockSize, so that each block
	// counts its admissions in one stripe of l.admitted.
	l.ids.next.Store(binary.LittleEndian.Uint64(seed[:]) &^ (1 << 63) &^ (idBlockSize - 1))
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

// Stats returns the Limiter's counts.
func (l *Limiter) Stats() Stats {
	return Stats{Admitted: l.admitted.sum(), Refused: l.refused.Load(), Overruns: l.overruns.Load(), FailedOpen: l.failedOpen.Load()}
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
	if !req.Max.plain() || !req.Expected.plain() {
		if err := req.Max.validate(); err != nil {
			return nil, err
		}
		if err := req.Expected.validate(); err != nil {
			return nil, err
		}
	}
	p := l.policy.Load()
	s := l.getState()
	s.adm.ID = l.ids.take(&s.ids)
	at := l.nowNanos()
	if err := l.build(p, &req, at, s); err != nil {
		l.refused.Add(1)
		l.putState(s)
		return nil, err
	}
	if req.MaxWait > 0 && l.waiters.active() {
		if key, ok := l.waiters.existing(&s.adm); ok {
			return l.wait(ctx, &req, s, key, at)
		}
	}
	err := l.try(ctx, &req, s, at)
	if err == nil {
		return s.handle(), nil
	}
	if req.MaxWait > 0 && waitable(err, req.MaxWait) {
		return l.wait(ctx, &req, s, decidingKey(s), at)
	}
	l.refused.Add(1)
	l.putState(s)
	return nil, err
}

// nowNanos reads the clock for a decision, in Unix nanoseconds.
func (l *Limiter) nowNanos() int64 {
	if l.real != nil {
		return l.real.nanos()
	}
	return l.clock.Now().UnixNano()
}

// try runs one admission attempt at at (Unix nanoseconds).
func (l *Limiter) try(ctx context.Context, req *Request, r *resState, at int64) error {
	r.adm.Deadline = at + int64(l.timeout(req)+l.expirySlack)
	if r.adm.Deadline < at {
		r.adm.Deadline = 1<<63 - 1
	}
	if len(r.adm.Charges) == 0 {
		r.open()
		l.admitted.add(r.adm.ID)
		return nil
	}
	var ok bool
	var err error
	var b *Batch
	if l.local != nil {
		ok, err = l.local.AdmitLocal(at, &r.adm)
	} else {
		b = r.toBatch()
		b.Deadline = time.Unix(0, r.adm.Deadline)
		ok, err = l.store.Admit(ctx, time.Unix(0, at), b)
	}
	if err != nil {
		if !r.failOpen() {
			return &StoreError{Op: "admit", Err: err}
		}
		// Every rule in play says on_store_error: open: admit, charge
		// nothing, and say so.
		r.adm.Charges = r.adm.Charges[:0]
		r.batch = nil
		r.failedOpen = true
		r.open()
		l.admitted.add(r.adm.ID)
		l.failedOpen.Add(1)
		return nil
	}
	if b != nil {
		r.resultsFrom(b)
	}
	if !ok {
		return l.refusal(r)
	}
	r.admittedAt = at
	r.open()
	l.admitted.add(r.adm.ID)
	return nil
}

// failOpen reports whether every enforced charge's rule admits when the
// store cannot answer.
func (s *resState) failOpen() bool {
	for i := range s.adm.Charges {
		c := &s.adm.Charges[i]
		if !c.Shadow && s.rule(c).OnStoreError != StoreErrorOpen {
			return false
		}
	}
	return true
}

func (l *Limiter) timeout(req *Request) time.Duration {
	if req.Timeout > 0 {
		return req.Timeout
	}
	return l.defaultTimeout
}

// build appends to r one charge per applicable rule and subject.
func (l *Limiter) build(p *compiledPolicy, req *Request, at int64, r *resState) error {
	return l.buildCharges(p, req, at, r, true)
}

// buildCharges is build; without checkFit, a charge too large for its rule
// is kept rather than refused (to look at a subject's limits).
func (l *Limiter) buildCharges(p *compiledPolicy, req *Request, at int64, r *resState, checkFit bool) error {
	// Pointers are stored only when they change: on the admission path a
	// store of a pointer into the heap costs a write barrier while the
	// collector runs.
	if r.policy != p {
		r.policy = p
	}
	if r.batch != nil {
		r.batch = nil
	}
	charges, subjects := r.inline[:0], r.subject[:0]
	// groups holds the subject groups of the first charges, read here
	// rather than through each charge's rule.
	var groups [len(r.inline)]int
	id := &req.Identity
	for _, i := range p.candidatesFor(id.Org) {
		rule := p.rules[i]
		if rule.hasMatch && !rule.matches(id) {
			continue
		}
		limit, burst, source := rule.Limit, rule.Burst, fromRule
		if !p.plain {
			limit, burst, source = p.effective(rule, id, time.Unix(0, at))
		}
		if limit == 0 || rule.hasTag && len(id.Tags) == 0 || rule.hasSession && id.Session == "" {
			continue
		}
		// The rule's charge, copied whole, then what this admission
		// changes of it.
		n := len(charges)
		if n < cap(charges) {
			charges = charges[:n+1]
		} else {
			charges = append(charges, inproc.Charge{})
		}
		c := &charges[n]
		*c = rule.charge
		if !p.plain {
			c.Limit, c.Burst, c.Source = limit, burst, uint8(source)
		}
		if rule.amountOfRequest {
			// What the rule reserves: the bound, or the expected usage
			// with ReserveEstimate when the request gives one. Written
			// out, as a call here would have every value the loop
			// holds in a register saved and loaded again.
			u := &req.Max
			if rule.estimate && !req.Expected.IsZero() {
				u = &req.Expected
			}
			c.Amount = u.amountOf(rule.measure, rule.metric)
		}
		switch rule.kind {
		case inproc.Rate:
			if checkFit && !c.Shadow && c.Amount > c.Capacity() {
				return &TooLargeError{Rule: rule.Name, Metric: rule.metric, Estimate: c.Amount, Limit: c.Capacity()}
			}
		case inproc.Budget:
			if checkFit && !c.Shadow && c.Amount > limit {
				return &TooLargeError{Rule: rule.Name, Metric: rule.metric, Estimate: c.Amount, Limit: limit}
			}
			start, end := PeriodBounds(rule.Period, time.Unix(0, at), rule.location)
			c.Period = start.Unix()
			c.PeriodEnd = end.UnixNano()
		}
		if !rule.hasTag {
			// Most often the subject of a charge before, of a rule on
			// the same attributes.
			seen := false
			for k, g := range groups[:min(n, len(groups))] {
				if g == rule.group {
					c.Subject, seen = charges[k].Subject, true
					break
				}
			}
			if n < len(groups) {
				groups[n] = rule.group
			}
			if !seen {
				c.Subject, subjects = l.subjectOf(p, rule, id, charges[:n], len(groups), subjects)
			}
			continue
		}
		// One charge per distinct tag.
		first := n
		for i, tag := range id.Tags {
			if slices.Contains(id.Tags[:i], tag) {
				continue
			}
			if i > 0 {
				charges = append(charges, charges[first])
			}
			charges[len(charges)-1].Subject, subjects = addSubject(subjects, subjectValue(rule, id, tag, l.serverID))
		}
		// A tag's subject is no other rule's.
		for k := first; k < min(len(charges), len(groups)); k++ {
			groups[k] = -1
		}
	}
	// Most often the slices are still the state's own arrays, as the
	// admission before left them: only their lengths change, which costs
	// no write barrier.
	if unsafe.SliceData(r.adm.Charges) == unsafe.SliceData(charges) {
		r.adm.Charges = r.adm.Charges[:len(charges)]
	} else {
		r.adm.Charges = charges
	}
	if unsafe.SliceData(r.adm.Subjects) == unsafe.SliceData(subjects) {
		r.adm.Subjects = r.adm.Subjects[:len(subjects)]
	} else {
		r.adm.Subjects = subjects
	}
	return nil
}

// subjectOf returns the index in subjects of rule's subject for id, adding
// it when it is new. A rule whose subject is built from the same
// attributes as one of the charges before reuses its subject, so that a
// composite subject is joined once per admission.
// The first seen charges before were looked at already.
func (l *Limiter) subjectOf(p *compiledPolicy, rule *compiledRule, id *Identity, before []inproc.Charge, seen int, subjects []string) (uint32, []string) {
	for i := seen; i < len(before); i++ {
		if p.rules[before[i].RuleIndex].group == rule.group {
			return before[i].Subject, subjects
		}
	}
	return addSubject(subjects, subjectValue(rule, id, "", l.serverID))
}

// addSubject returns the index of subject in subjects, appending it when
// it is not there.
func addSubject(subjects []string, subject string) (uint32, []string) {
	for i, s := range subjects {
		if s == subject {
			return uint32(i), subjects
		}
	}
	n := len(subjects)
	if n < cap(subjects) {
		// The state's array most likely holds this subject already, from
		// the admission before: writing it again would cost a write
		// barrier while the collector runs.
		if subjects = subjects[:n+1]; subjects[n] != subject {
			subjects[n] = subject
		}
		return uint32(n), subjects
	}
	return uint32(n), append(subjects, subject)
}

func (r *compiledRule) matches(id *Identity) bool {
	m := &r.Match
	return (len(m.Models) == 0 || slices.Contains(m.Models, id.Model)) &&
		(len(m.Tiers) == 0 || slices.Contains(m.Tiers, id.Tier)) &&
		(len(m.Routes) == 0 || slices.Contains(m.Routes, id.Route))
}

// refusal builds the error for a refused admission: a budget wins over a
// rate; among rates and concurrency, the longest wait.
func (l *Limiter) refusal(r *resState) error {
	var budget, wait *inproc.Charge
	for i := range r.adm.Charges {
		c := &r.adm.Charges[i]
		if c.Allowed || c.Shadow {
			continue
		}
		if c.Kind == inproc.Concurrency && c.RetryAfter > int64(l.busyRetryAfter) {
			c.RetryAfter = int64(l.busyRetryAfter)
		}
		c.RetryAfter = int64(ceilMillisecond(time.Duration(c.RetryAfter)))
		switch {
		case c.Kind == inproc.Budget:
			if budget == nil || c.ResetAt > budget.ResetAt {
				budget = c
			}
		case wait == nil || c.RetryAfter > wait.RetryAfter:
			wait = c
		}
	}
	if budget != nil {
		return &BudgetError{r.refusalOf(budget)}
	}
	if wait == nil {
		return &StoreError{Op: "admit", Err: errors.New("store refused a batch without saying which charge")}
	}
	if wait.Kind == inproc.Concurrency {
		return &BusyError{r.refusalOf(wait)}
	}
	return &RateLimitError{r.refusalOf(wait)}
}

func (s *resState) refusalOf(c *inproc.Charge) Refusal {
	rule := s.rule(c)
	return Refusal{
		Rule: rule.Name, Subject: rule.Subject, Kind: rule.Kind, Metric: rule.metric,
		Limit: c.Limit, Used: c.Used, Remaining: c.Remaining,
		Window: rule.Window, Period: rule.Period,
		RetryAfter: time.Duration(c.RetryAfter), ResetAt: s.resetAt(c),
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
	res, err := l.store.Sweep(ctx, l.clock.Now())
	if err != nil {
		return res, &StoreError{Op: "sweep", Err: err}
	}
	if res.Reservations > 0 {
		l.waiters.notify()
	}
	return res, nil
}

// RunSweeper calls Sweep every interval until ctx is done. Errors are passed
// to onError when it is not nil.
func (l *Limiter) RunSweeper(ctx context.Context, interval time.Duration, onError func(error)) {
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
