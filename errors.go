package sluice

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/dollars"
	"github.com/sluicehq/sluice/internal/human"
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
	// Source says where Limit came from: the rule's layer (config, rule,
	// ...), a tier, an override, or the provider (LimitFromProvider).
	Source string
	// RetryAfter is when a retry may succeed (rate and busy), rounded up to
	// the millisecond; RetryAt is that instant, by the clock that decided.
	RetryAfter time.Duration
	RetryAt    time.Time
	// ResetAt is when the rule's counter resets: the next period for a
	// budget, a full bucket for a rate rule.
	ResetAt time.Time
	// Class describes the class of a refusal by a class rule (nil for
	// other rules): Limit, Used and Remaining are then its share's.
	Class *ClassShare
	// Result is the room of every rule the refused admission looked at,
	// for the response's rate-limit header fields; nil when the refusal
	// was not made by Admit, or was made before the store was asked (a
	// provider's hold).
	Result *Result
}

// RateLimitError is a refusal by a rate rule. Retry after RetryAfter.
type RateLimitError struct{ Refusal }

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limit %q reached%s: %s per %s%s; retry in %s", e.Rule, e.classNote(), amountOf(e.Metric, e.Limit), human.Per(e.Window), sourceNote(e.Source), e.retryWords())
}

// Is matches ErrRateLimited.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// BusyError is a refusal by a concurrency rule. Retry after RetryAfter.
type BusyError struct{ Refusal }

func (e *BusyError) Error() string {
	return fmt.Sprintf("concurrency limit %q reached%s: %s in flight; retry in %s", e.Rule, e.classNote(), human.Plural(e.Limit, "call"), e.retryWords())
}

// retryWords says when to retry: "3 seconds (at 2026-03-05T00:00:03Z)",
// the instant left out when it is unknown (a Refusal made by hand).
func (r *Refusal) retryWords() string {
	s := human.Duration(r.RetryAfter)
	if !r.RetryAt.IsZero() {
		s += " (at " + human.Instant(r.RetryAt) + ")"
	}
	return s
}

// classNote is the part of a refusal's message that names its class.
func (r *Refusal) classNote() string {
	if r.Class == nil {
		return ""
	}
	return fmt.Sprintf(" for class %q (floor %d, share %d of %d, no idle share to borrow)",
		r.Class.Class, r.Class.Floor, r.Class.Share, r.Class.Capacity)
}

// Is matches ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// BudgetError is a refusal by a budget. It is terminal until ResetAt.
type BudgetError struct{ Refusal }

func (e *BudgetError) Error() string {
	if e.Insufficient() {
		return fmt.Sprintf("budget %q has %s left this %s, less than the %s this request may use; resets at %s",
			e.Rule, partOf(e.Metric, e.Remaining, e.Limit), e.Period, amountOf(e.Metric, e.Requested), e.ResetAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("budget %q exhausted: %s used this %s; resets at %s",
		e.Rule, partOf(e.Metric, e.Used, e.Limit), e.Period, e.ResetAt.UTC().Format(time.RFC3339))
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
	// Source says where Limit came from, as Refusal.Source.
	Source string
	// Result is the room of every rule that applies, read from the store
	// without charging, for the response's rate-limit header fields: its
	// Headroom is Rule's, which the request never fits; nil when the
	// store did not answer.
	Result *Result
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("request can never fit rule %q: needs %s, the most it admits is %s%s", e.Rule, amountOf(e.Metric, e.Estimate), amountOf(e.Metric, e.Limit), sourceNote(e.Source))
}

// amountOf writes n of metric m as a message says it: money in dollars
// ("$1.01"), anything else as a count and its unit ("100 tokens").
func amountOf(m Metric, n int64) string {
	if m == MetricCost {
		return dollars.Money(n)
	}
	return fmt.Sprintf("%d %s", n, m)
}

// partOf writes part of whole, both of metric m: "$1.01 of $1.00",
// "100 of 100 tokens".
func partOf(m Metric, part, whole int64) string {
	if m == MetricCost {
		return dollars.Money(part) + " of " + dollars.Money(whole)
	}
	return fmt.Sprintf("%d of %d %s", part, whole, m)
}

// sourceNote is what a refusal's message says of its limit's source: that
// the provider set it, the one source a client could not guess.
func sourceNote(source string) string {
	if source == LimitFromProvider {
		return ", the provider's limit"
	}
	return ""
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
