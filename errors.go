package sluice

import (
	"errors"
	"fmt"
	"time"
)

// Sentinels matched by errors.Is on the typed errors.
var (
	// ErrRateLimited: a rate rule refused; retry after RetryAfter.
	ErrRateLimited = errors.New("sluice: rate limited")
	// ErrBusy: a concurrency rule refused; retry after RetryAfter.
	ErrBusy = errors.New("sluice: too many calls in flight")
	// ErrBudgetExhausted: a budget refused; terminal until ResetAt.
	ErrBudgetExhausted = errors.New("sluice: budget exhausted")
	// ErrTooLarge: the charge exceeds what the rule could ever admit.
	ErrTooLarge = errors.New("sluice: request can never fit")
	// ErrStoreUnavailable: the store did not answer.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrInvalidUsage: usage with an amount that is negative or above its
	// ceiling (MaxTokens, MaxCost). From Admit: the estimate was refused and
	// nothing charged. From Settle: the usage was not believed and the
	// reservation was charged what it reserved.
	ErrInvalidUsage = errors.New("sluice: invalid usage")
)

// Refusal describes the rule that decided a refusal.
type Refusal struct {
	Rule    string
	Subject string
	Kind    Kind
	Metric  Metric
	Limit   int64
	// Used is the usage counted against the rule, reservations included.
	Used      int64
	Remaining int64
	// Requested is what the refused request would have charged the rule.
	Requested int64
	// Window and Period describe the rule for messages.
	Window time.Duration
	Period Period
	// RetryAfter is when a retry may succeed (rate and busy), rounded up to
	// the millisecond.
	RetryAfter time.Duration
	// ResetAt is when the rule's counter resets: the next period for a
	// budget, a full bucket for a rate rule.
	ResetAt time.Time
	// Class describes the class of a refusal by a class rule (nil for
	// other rules): Limit, Used and Remaining are then its share's.
	Class *ClassShare
	// Result is the room of every rule the refused admission looked at,
	// for the response's rate-limit header fields; nil when the refusal
	// was not made by Admit.
	Result *Result
}

// RateLimitError is a refusal by a rate rule. Retry after RetryAfter.
type RateLimitError struct{ Refusal }

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limit %q reached%s: %d %s per %v; retry in %v", e.Rule, e.classNote(), e.Limit, e.Metric, e.Window, e.RetryAfter)
}

// Is matches ErrRateLimited.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// BusyError is a refusal by a concurrency rule. Retry after RetryAfter.
type BusyError struct{ Refusal }

func (e *BusyError) Error() string {
	return fmt.Sprintf("concurrency limit %q reached%s: %d calls in flight; retry in %v", e.Rule, e.classNote(), e.Limit, e.RetryAfter)
}

// Is matches ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// BudgetError is a refusal by a budget. It is terminal until ResetAt.
type BudgetError struct{ Refusal }

func (e *BudgetError) Error() string {
	if e.Insufficient() {
		return fmt.Sprintf("budget %q has %d of %d %s left this %s, less than the %d this request may use; resets at %s",
			e.Rule, e.Remaining, e.Limit, e.Metric, e.Period, e.Requested, e.ResetAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("budget %q exhausted: %d of %d %s used this %s; resets at %s",
		e.Rule, e.Used, e.Limit, e.Metric, e.Period, e.ResetAt.UTC().Format(time.RFC3339))
}

// Insufficient reports a budget that has room left, but less than the
// refused request may use: a smaller request fits before the reset.
func (e *BudgetError) Insufficient() bool { return e.Remaining > 0 }

// Is matches ErrBudgetExhausted.
func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExhausted }

// TooLargeError is a charge larger than a rule could ever admit: a retry
// can never succeed.
type TooLargeError struct {
	Rule string
	// Subject is the rule's subject (workspace, user, ...).
	Subject  string
	Metric   Metric
	Estimate int64
	Limit    int64
	// Result is the room of every rule that applies, read from the store
	// without charging, for the response's rate-limit header fields; nil
	// when the store did not answer.
	Result *Result
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("request can never fit rule %q: needs %d %s, the most it admits is %d", e.Rule, e.Estimate, e.Metric, e.Limit)
}

// Is matches ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// StoreError is a store that did not answer.
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("sluice: store unavailable: %s: %v", e.Op, e.Err)
}

// Unwrap returns the store's own error.
func (e *StoreError) Unwrap() error { return e.Err }

// Is matches ErrStoreUnavailable.
func (e *StoreError) Is(target error) bool { return target == ErrStoreUnavailable }
