// Package sluice puts a ceiling on what LLM traffic may cost before the model
// is called.
//
// A [Limiter] checks every applicable [Rule] of a [Request] against a [Store]
// in one atomic step: either every rule admits and every rule is charged, or
// none is. Admission returns a [Reservation]; when the model call ends,
// [Reservation.Settle] replaces each reserved amount with the usage the
// provider reported, refunding the difference or charging the overrun.
//
// Rules come in three kinds:
//
//   - rate: a token bucket (GCRA) of capacity Burst refilled continuously at
//     Limit per Window;
//   - concurrency: at most Limit calls admitted and not yet settled, held as
//     leases that expire, so a crashed holder frees its slot;
//   - budget: at most Limit per calendar period (day, ISO week, month) in UTC
//     or a named time zone.
//
// A refusal is a typed error: [*RateLimitError] and [*BusyError] say when to
// retry, [*BudgetError] is terminal until its ResetAt, [*TooLargeError] can
// never fit, and [*StoreError] means the store could not answer. Each matches
// its sentinel with errors.Is ([ErrRateLimited], [ErrBusy],
// [ErrBudgetExhausted], [ErrTooLarge], [ErrStoreUnavailable]).
//
// Usage is bounded: no token count (nor custom amount) above [MaxTokens]
// (2^40) and no cost above [MaxCost] (2^50 micro-dollars) is ever counted.
// Admit refuses such an estimate, like a negative one, with
// [ErrInvalidUsage]; Settle treats such usage as a provider's error,
// charges the reservation what it reserved, and returns an error matching
// [ErrInvalidUsage]. Stores saturate their budget counters at 2^53 (a
// limit above it counts as 2^53), so no sequence of calls wraps a counter
// negative or past a limit.
//
// Stores live in their own packages: store/memstore (one process),
// store/sqlitestore (one node, durable).
package sluice
