// Package retry is the client-side half of Sluice's refusal contract: it
// classifies the outcome of an HTTP call to Sluice or to a model provider,
// and retries only what a retry can fix.
//
// Every outcome falls in one class:
//
//   - [Transient]: connection errors, timeouts, 408, 409 (a lock or an
//     idempotent request still in flight), 500, 502, 503, 504 and other 5xx
//     (Anthropic's 529 overloaded included). Retried with exponential backoff
//     and full jitter, or after the server's hint when it sent one.
//   - [Throttled]: a 429 that is not a budget or quota refusal. Retried
//     exactly when the server said (retry-after-ms, then Retry-After), never
//     earlier; with no hint, as for Transient. Sluice sends both headers on
//     every rate and busy refusal, retry-after-ms exact to the millisecond.
//   - [Terminal]: 400, 401, 403, 404, 413, 422 and any other 4xx, 501, 505,
//     511, any response with x-should-retry: false, a 429 whose body says the
//     budget or quota is exhausted (OpenAI insufficient_quota), and
//     context.Canceled. Never retried: no interval will help, and on a metered
//     API a retry loop against an exhausted budget is an attack on yourself.
//   - [Success]: any 1xx, 2xx or 3xx response.
//
// [ClassifyResponse] documents the order in which these signals are read.
//
// [Do] runs a call under a [Policy]; [Transport] does the same for every
// request a [net/http.Client] sends. Both stop at the first terminal
// outcome, after Policy.MaxAttempts attempts, when a hint is longer than
// Policy.MaxHint, when the wait would outlast the context's deadline, or when
// the context is done.
package retry
