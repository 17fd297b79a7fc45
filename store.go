package sluice

import (
	"cmp"
	"context"
	"time"
)

// Store holds counters and reservations. Admit checks and charges a Batch
// atomically; Settle replaces its charges by their Actual amounts; Sweep
// settles batches past their deadline. Every method returns an error when
// the store cannot answer: an outage must never look like room.
//
// A Batch is passed by value and stays the caller's: a store reads it, and
// writes results, only during the call, and copies what it keeps past it
// (for its sweep, a journal). docs/stores.md says how to write one, and
// store/storetest checks it.
//
// Local stores decide at the now they are given; distributed stores may use
// their server's clock instead.
type Store interface {
	// Admit evaluates every charge of b and writes what it found for
	// b.Charges[i] to results[i] (results is as long as b.Charges). If
	// every charge that is not Shadow is allowed, it applies every charge
	// and returns true; otherwise it applies none and returns false.
	Admit(ctx context.Context, now time.Time, b Batch, results []ChargeResult) (bool, error)
	// Settle replaces each charge's Amount by its Actual and frees the
	// batch's leases. A batch already settled by Sweep is left alone.
	Settle(ctx context.Context, now time.Time, b Batch) error
	// Peek writes each charge's result as Admit would, without charging
	// anything.
	Peek(ctx context.Context, now time.Time, b Batch, results []ChargeResult) error
	// Sweep settles every admitted batch whose Deadline (or the deadline
	// a LeaseRenewer moved it to) is not after now:
	// leases are freed, budget charges are charged their Amount
	// (ExpiryCharge) or refunded (ExpiryRelease).
	Sweep(ctx context.Context, now time.Time) (SweepResult, error)
	// Close releases the store's resources.
	Close() error
}

// LeaseRenewer is a Store that can move the deadline of the batches it
// holds open, so that a Limiter renews the reservations of its calls in
// flight (Options.LeaseTimeout): those of a process that died are swept
// soon after it, while a long call is not.
type LeaseRenewer interface {
	// RenewLeases moves the deadline of each admitted batch of renewals to
	// the Deadline it is given with (its ID and Charges those of the
	// admission): its leases expire, and the sweep settles it, no sooner. A
	// batch settled, swept or past its deadline at now is left alone (its
	// leases may be another's already), and a deadline never moves back.
	RenewLeases(ctx context.Context, now time.Time, renewals []Batch) error
}

// CounterCeiling is the most a store's budget counter holds: 2^53, the
// largest integer below which a double holds every integer exactly (so a
// store whose scripts compute in doubles keeps the same figures). Stores
// take every amount and limit within [0, CounterCeiling] and saturate sums
// there: a counter at the ceiling refuses whatever the limit, and no input
// wraps it negative.
const CounterCeiling = 1 << 53

// AsyncSettler is a Store that can settle without its caller waiting for
// the settlement to be durable (a store that journals to disk).
// SettleAsync applies b at once as Settle does, and calls done with what
// Settle would have returned once the settlement is as durable as Settle's
// return would make it: before SettleAsync returns, or later from the
// store's own goroutine. done must not block, nor call the store.
type AsyncSettler interface {
	SettleAsync(ctx context.Context, now time.Time, b Batch, done func(error))
}

// SweepResult counts what a sweep did.
type SweepResult struct {
	// Reservations settled by the sweep.
	Reservations int
	// Charged and Released count budget charges by expiry policy.
	Charged  int
	Released int
}

// SweepReporter is a Store whose sweep can also tell what it settled: each
// batch with, for each of its charges, what it was settled at as its
// Actual (a budget charge's Amount, or 0 when released; other kinds
// charge nothing at expiry). Limiter.Sweep uses it when the store has it,
// for Options.OnSwept.
type SweepReporter interface {
	SweepReport(ctx context.Context, now time.Time) (SweepResult, []Batch, error)
}

// CounterKey names one counter.
type CounterKey struct {
	// Rule is the fingerprint of the rule's name and counting shape.
	Rule uint64
	// Subject is the subject's value (parts of a composite joined by 0x1f).
	Subject string
	// Period is, for budgets, the Unix second at which the period began.
	Period int64
}

// Charge is one rule's part of a Batch: what the store is asked to check
// and apply.
type Charge struct {
	Key  CounterKey
	Kind Kind
	// Limit and Burst are the effective values (tier and overrides applied).
	Limit int64
	Burst int64
	// Window is a rate rule's refill window.
	Window time.Duration
	// PeriodEnd is when a budget's period ends.
	PeriodEnd time.Time
	// Amount is charged at admission.
	Amount int64
	// Actual replaces Amount at settlement: Settle reads it, Admit and
	// Peek do not.
	Actual   int64
	OnExpiry string
	// Shadow charges are counted but never refuse.
	Shadow bool
}

// ChargeResult is what a store found for one charge of a batch, in Admit or
// Peek.
type ChargeResult struct {
	// Allowed reports whether the charge fits.
	Allowed bool
	// Remaining is the room left: after the charge when admitted, before
	// it otherwise.
	Remaining int64
	// Used is the usage counted (budgets: settled plus reserved; rate: the
	// bucket's drawn level; concurrency: leases held).
	Used int64
	// RetryAfter is, for a refused rate or concurrency charge, when it may
	// fit.
	RetryAfter time.Duration
	// ResetAt is when the counter is whole again: a full bucket, the end of
	// the period, the earliest lease expiry.
	ResetAt time.Time
}

// Batch is the set of charges of one admission. The Limiter passes the
// same ID, Deadline and charges to Admit and, once the call ends, to
// Settle, with each charge's Actual set.
type Batch struct {
	// ID is unique per Limiter.
	ID uint64
	// Deadline is when the sweep may settle the batch and when its leases
	// expire, unless a LeaseRenewer moves it later: a store that renews
	// keeps the renewed deadline itself.
	Deadline time.Time
	Charges  []Charge
}

// BurstOrLimit returns a rate charge's bucket capacity.
func (c *Charge) BurstOrLimit() int64 {
	return cmp.Or(max(c.Burst, 0), c.Limit)
}
