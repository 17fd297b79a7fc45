package sluice

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/inproc"
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
//
// ID and Deadline stay as they were after settlement; Result and Charges
// describe the admission until it is settled or released, and are empty
// after: the admission's state goes back to the Limiter for the next one.
type Reservation struct {
	s *resState
	// id is the admission's; its low bits are s's generation while s
	// holds this admission (see gen): once settled, s serves other
	// admissions under other generations, which this handle neither reads
	// nor settles.
	id       uint64
	deadline int64
}

// gen returns the generation of r's state while it holds r's admission.
func (r *Reservation) gen() uint64 { return r.id & genMask }

// The word of a resState holds, from the high bits down, its generation
// (40 bits), the number of readers pinning it (22 bits) and its state (2
// bits). A state serves one admission per generation, the low 40 bits of
// the admission's id. The ids a state takes only grow (they come from
// blocks of the Limiter's counter, each later than the one before), so two
// admissions through one state share a generation only when 2^40 ids were
// handed out between them: a handle settled that much later would be taken
// for the current admission, which at three million admissions a second is
// four days of a handle kept and settled twice.
const (
	stateNew uint64 = iota // never opened
	stateOpen
	stateSettling
	stateDone

	stateMask = 3
	pinOne    = 1 << 2
	pinMask   = (1<<22 - 1) << 2
	genShift  = 24
	genMask   = 1<<(64-genShift) - 1
)

// resState is an admission's state: its charges, held inline, and where it
// is in its life. A Limiter keeps states in a pool and takes one per Admit;
// a state goes back when its admission is refused, or settled and no
// reader pins it, so that an admission allocates only its small
// Reservation, and that in blocks (see handle).
type resState struct {
	// The pointers come first and are few: the collector scans no further
	// than the last.
	limiter *Limiter
	// policy is the policy the charges were built from; a charge's
	// RuleIndex is its rule's place in policy.rules.
	policy *compiledPolicy
	// batch is the charges as a Batch, for a store that does not read
	// them in place; nil with an in-process store.
	batch *Batch
	// handles is the block the state makes its admissions' Reservations
	// in, handed out from index next on (see handle).
	handles *[handleBlock]Reservation
	adm     inproc.Admission
	// subject holds adm.Subjects when there is one.
	subject [1]string
	// admittedAt is the admission's clock reading (Unix ns), which a
	// settlement without an overrun can use instead of reading the clock
	// again.
	admittedAt int64
	word       atomic.Uint64
	// ids is the block this state takes its admissions' ids from.
	ids  idBlock
	next int
	// failedOpen marks an admission let through uncharged (see
	// Result.FailedOpen).
	failedOpen bool
	// uncertain is set when the store failed a settlement: it may have
	// applied it before failing (a reply lost on the way back).
	uncertain bool
	// overrun is set by beginSettle when a charge's Actual is above its
	// Amount, for endSettle to count.
	overrun bool
	inline  [3]inproc.Charge
}

// getState returns a state for a new admission, from l's pool.
func (l *Limiter) getState() *resState {
	if s, ok := l.states.Get().(*resState); ok {
		return s
	}
	return &resState{limiter: l}
}

// putState gives back a state that was never opened: its admission was
// refused, and no handle was made for it.
func (l *Limiter) putState(s *resState) {
	s.failedOpen, s.uncertain = false, false
	l.states.Put(s)
}

// open marks an admitted state open under a new generation. Nothing else
// holds it: it is new, was refused (never opened), or done with no reader
// left, and the handles of earlier generations stop at the generation.
func (s *resState) open() { s.word.Store((s.adm.ID&genMask)<<genShift | stateOpen) }

// handleBlock is how many Reservations are allocated together: an
// allocation costs as much as the rest of an admission's work in the
// engine, and a block of them little more than one. A Reservation is never
// written after it is made and each is handed out once, so a block is
// shared by admissions that never meet; a Reservation kept keeps its
// block's memory (handleBlock*24 bytes) with it.
const handleBlock = 16

// handle returns the Reservation of an open state.
func (s *resState) handle() *Reservation {
	if s.handles == nil || s.next == len(s.handles) {
		s.newHandles()
	}
	// The block's handles point to s already: an admission writes no
	// pointer, which would cost a write barrier while the collector marks.
	h := &s.handles[s.next]
	s.next++
	h.id, h.deadline = s.adm.ID, s.adm.Deadline
	return h
}

// newHandles gives s a new block of handles, each pointing to s. Out of
// line: an admission calls it once in handleBlock.
//
//go:noinline
func (s *resState) newHandles() {
	// Written out so that the compiler sees each store follow the
	// allocation and needs no write barrier for it (a loop would).
	s.handles, s.next = &[handleBlock]Reservation{{s: s}, {s: s}, {s: s}, {s: s}, {s: s}, {s: s}, {s: s}, {s: s},
		{s: s}, {s: s}, {s: s}, {s: s}, {s: s}, {s: s}, {s: s}, {s: s}}, 0
}

// claim moves s from open to settling for the holder of generation gen,
// reporting whether it did: not when the admission is settled, being
// settled, or long gone, nor for the zero Reservation (s nil).
func (s *resState) claim(gen uint64) bool {
	if s == nil {
		return false
	}
	for {
		w := s.word.Load()
		if w>>genShift != gen || w&stateMask != stateOpen {
			return false
		}
		if s.word.CompareAndSwap(w, w&^stateMask|stateSettling) {
			return true
		}
	}
}

// reopen moves s from settling back to open, after a failed settlement.
func (s *resState) reopen() { s.word.Add(^uint64(0)) } // stateSettling - 1 == stateOpen

// finish marks a settled state done; the last of it and its readers gives
// it back to the pool.
func (s *resState) finish() {
	if w := s.word.Add(stateDone - stateSettling); w&pinMask == 0 {
		s.recycle()
	}
}

// recycle gives a done state back to its Limiter's pool. Its word stays
// done (no handle reads or settles it) until open starts a new generation.
func (s *resState) recycle() {
	s.failedOpen, s.uncertain = false, false
	if s.batch != nil {
		s.batch = nil
	}
	s.limiter.states.Put(s)
}

// pin keeps r's state from going back to the pool while it is read,
// reporting whether r's admission is still there to read (open, or being
// settled).
func (r *Reservation) pin() bool {
	if r.s == nil {
		return false
	}
	for {
		w := r.s.word.Load()
		if w>>genShift != r.gen() || w&stateMask == stateNew || w&stateMask == stateDone {
			return false
		}
		if w&pinMask == pinMask {
			runtime.Gosched() // readers beyond count: wait for one to leave
			continue
		}
		if r.s.word.CompareAndSwap(w, w+pinOne) {
			return true
		}
	}
}

func (r *Reservation) unpin() {
	if w := r.s.word.Add(^uint64(pinOne - 1)); w&stateMask == stateDone && w&pinMask == 0 {
		r.s.recycle()
	}
}

// ID returns the reservation's identifier, unique per Limiter.
func (r *Reservation) ID() uint64 { return r.id }

// Deadline returns when the sweep may settle the reservation.
func (r *Reservation) Deadline() time.Time { return time.Unix(0, r.deadline) }

// Result returns what the admission found; the zero Result once the
// reservation is settled or released. It is worked out from the charges
// when asked, so that an admission whose result nobody reads does not pay
// for it.
func (r *Reservation) Result() Result {
	if !r.pin() {
		return Result{}
	}
	defer r.unpin()
	return r.s.result()
}

// Charges returns the reservation's charges as admitted, each with its
// results (Actual is zero); nil once the reservation is settled or
// released.
func (r *Reservation) Charges() []Charge {
	if !r.pin() {
		return nil
	}
	defer r.unpin()
	return r.s.charges()
}

// rule returns the rule of one of s's charges.
func (s *resState) rule(c *inproc.Charge) *compiledRule { return s.policy.rules[c.RuleIndex] }

// resetAt returns a charge's ResetAt as a time: a budget's in its rule's
// time zone, as PeriodBounds gives it.
func (s *resState) resetAt(c *inproc.Charge) time.Time {
	if c.ResetAt == 0 {
		return time.Time{}
	}
	t := time.Unix(0, c.ResetAt)
	if c.Kind == inproc.Budget {
		t = t.In(s.rule(c).location)
	}
	return t
}

func (s *resState) result() Result {
	res := Result{FailedOpen: s.failedOpen}
	var least *inproc.Charge
	var leastRoom float64
	for i := range s.adm.Charges {
		c := &s.adm.Charges[i]
		if c.Shadow {
			if !c.Allowed {
				res.Shadowed = append(res.Shadowed, s.rule(c).Name)
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
			if w, ok := warningOf(s.rule(c), s.adm.SubjectOf(c), c); ok {
				res.Warnings = append(res.Warnings, w)
			}
		}
	}
	if least != nil {
		res.Rule = s.rule(least).Name
		res.Limit = least.Limit
		res.Remaining = least.Remaining
		res.ResetAt = s.resetAt(least)
	}
	return res
}

func (s *resState) charges() []Charge {
	if len(s.adm.Charges) == 0 {
		return nil
	}
	return s.describe().Charges
}

// toBatch returns s's charges as a Batch for a Store, with the results
// they hold, and keeps it as s.batch.
func (s *resState) toBatch() *Batch {
	b := s.describe()
	s.batch = b
	return b
}

// describe returns s's charges as a new Batch, with the results they hold.
// It does not read Actual, which a settlement may be writing.
func (s *resState) describe() *Batch {
	b := &Batch{ID: s.adm.ID, Deadline: time.Unix(0, s.adm.Deadline), Charges: make([]Charge, len(s.adm.Charges))}
	for i := range s.adm.Charges {
		c, out := &s.adm.Charges[i], &b.Charges[i]
		rule := s.rule(c)
		out.Key = CounterKey{Rule: c.Rule, Subject: s.adm.SubjectOf(c), Period: c.Period}
		out.Kind, out.Limit, out.Burst, out.Window = rule.Kind, c.Limit, c.Burst, rule.Window
		out.Amount, out.OnExpiry, out.Shadow = c.Amount, rule.OnExpiry, c.Shadow
		out.source, out.rule = limitSource(c.Source), rule
		if c.Kind == inproc.Budget {
			out.PeriodEnd = time.Unix(0, c.PeriodEnd).In(rule.location)
		}
		out.Allowed, out.Remaining, out.Used = c.Allowed, c.Remaining, c.Used
		out.RetryAfter, out.ResetAt = time.Duration(c.RetryAfter), s.resetAt(c)
	}
	return b
}

// resultsFrom copies the results a Store filled in b to s's charges.
func (s *resState) resultsFrom(b *Batch) {
	for i := range s.adm.Charges {
		c, in := &s.adm.Charges[i], &b.Charges[i]
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
	if !u.plain() {
		if err := u.validate(); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
	}
	return r.settle(ctx, &u, false)
}

// Release refunds every charge of a call that never reached the model.
// Releasing a settled reservation does nothing.
func (r *Reservation) Release(ctx context.Context) error {
	return r.settle(ctx, nil, true)
}

func (r *Reservation) settle(ctx context.Context, u *Usage, release bool) error {
	if !r.s.claim(r.gen()) {
		return nil
	}
	s := r.s
	now, ok := s.beginSettle(u, release)
	if !ok {
		return nil
	}
	l := s.limiter
	if l.local != nil {
		return s.endSettle(l.local.SettleLocal(ctx, now, &s.adm))
	}
	s.copyActuals()
	return s.endSettle(l.store.Settle(ctx, time.Unix(0, now), s.batch))
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
	if !r.s.claim(r.gen()) {
		done(nil)
		return
	}
	s := r.s
	now, ok := s.beginSettle(&u, false)
	if !ok {
		done(nil)
		return
	}
	l := s.limiter
	if l.local != nil {
		if as, ok := l.local.(localAsyncSettler); ok {
			as.SettleLocalAsync(now, &s.adm, func(err error) { done(s.endSettle(err)) })
			return
		}
		done(s.endSettle(l.local.SettleLocal(ctx, now, &s.adm)))
		return
	}
	s.copyActuals()
	at, b := time.Unix(0, now), s.batch
	if as, ok := l.store.(AsyncSettler); ok {
		as.SettleAsync(ctx, at, b, func(err error) { done(s.endSettle(err)) })
		return
	}
	go func() { done(s.endSettle(l.store.Settle(ctx, at, b))) }()
}

// beginSettle sets each charge's Actual of a state its caller claimed; it
// returns the time to settle at, or false when there is nothing to settle
// (no charges), in which case the state is done.
func (s *resState) beginSettle(u *Usage, release bool) (int64, bool) {
	charges := s.adm.Charges
	if len(charges) == 0 {
		s.finish()
		return 0, false
	}
	reported := u != nil && !u.IsZero()
	// Refunds need no fresh time: a bucket refunded below the admission
	// time is full at any later time too. An overrun draws from now.
	now, overrun := s.admittedAt, false
	for i := range charges {
		c := &charges[i]
		switch {
		case release:
			c.Actual = 0
		case !reported || c.Kind == inproc.Concurrency:
			c.Actual = c.Amount
		default:
			rule := s.rule(c)
			c.Actual = u.amountOf(rule.measure, rule.metric)
		}
		if s.uncertain && c.Kind == inproc.Rate {
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
		now = s.limiter.clock.Now().UnixNano()
	}
	s.overrun = overrun
	return now, true
}

// copyActuals copies each charge's Actual to the Batch the store admitted.
func (s *resState) copyActuals() {
	for i := range s.adm.Charges {
		s.batch.Charges[i].Actual = s.adm.Charges[i].Actual
	}
}

// endSettle finishes a settlement the store answered with err: on success
// it counts the overruns and marks the state done, which may give it back
// to the pool; on failure the reservation is open again, for a retry.
func (s *resState) endSettle(err error) error {
	if err != nil {
		s.uncertain = true
		s.reopen()
		return &StoreError{Op: "settle", Err: err}
	}
	l := s.limiter
	if s.overrun {
		s.countOverruns()
	}
	s.finish()
	l.waiters.notify()
	return nil
}

// countOverruns counts the charges settled above their reservation, and
// reports each to Options.OnOverrun.
func (s *resState) countOverruns() {
	l := s.limiter
	for i := range s.adm.Charges {
		if c := &s.adm.Charges[i]; c.Actual > c.Amount && c.Kind != inproc.Concurrency {
			l.overruns.Add(1)
			if l.onOverrun != nil {
				l.onOverrun(Overrun{Rule: s.rule(c).Name, Subject: s.adm.SubjectOf(c), Reserved: c.Amount, Actual: c.Actual})
			}
		}
	}
}
