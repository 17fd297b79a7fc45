package sluicehttp

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// Refusal is how a refusal is answered over HTTP: the status, the retry
// signals, and what the body says. Middleware and the SDK wrappers answer
// with it, each writing the body in the error shape of its API.
type Refusal struct {
	// Status is 429 (rate limit, busy, budget), 413 (never fits) or 503
	// (store unavailable).
	Status int
	// Code names the outcome: rate_limit_exceeded,
	// concurrency_limit_exceeded, budget_exceeded, budget_insufficient,
	// request_too_large or store_unavailable.
	Code string
	// Message is a sentence for the client that names the limit and when
	// it resets.
	Message string
	// RetryAfter, when above zero, is sent as Retry-After (seconds, rounded
	// up) and retry-after-ms.
	RetryAfter time.Duration
	// Terminal is true when waiting cannot help (a budget until its reset,
	// a request that never fits): it is sent as x-should-retry: false.
	Terminal bool
	// Limit describes the rule that refused; nil for a store error.
	Limit *RefusalLimit

	// refusal is the deciding rule's figures for the X-RateLimit fields;
	// nil for too large and store errors.
	refusal *sluice.Refusal
	// result is the room of every rule the refused admission looked at,
	// for the fields of the rules with the least; nil when the store was
	// not asked.
	result *sluice.Result
}

// RefusalLimit is the limit object of a refusal body.
type RefusalLimit struct {
	Rule      string `json:"rule"`
	Subject   string `json:"subject"`
	Metric    string `json:"metric"`
	Limit     int64  `json:"limit"`
	Used      int64  `json:"used"`
	Remaining int64  `json:"remaining"`
	// Requested is what the refused request would have charged.
	Requested    int64  `json:"requested,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	ResetAt      string `json:"reset_at,omitempty"`
	// Source says where Limit came from (see sluice.Refusal.Source).
	Source string `json:"source,omitempty"`
}

// RefusalOf maps an error from Limiter.Admit to its HTTP answer. ok is
// false for an error that is not a refusal (the context's error, invalid
// usage).
func RefusalOf(err error) (r Refusal, ok bool) {
	var (
		rl *sluice.RateLimitError
		bz *sluice.BusyError
		bu *sluice.BudgetError
		tl *sluice.TooLargeError
		se *sluice.StoreError
	)
	switch {
	case errors.As(err, &rl):
		r = Refusal{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded",
			Message: sentence(rl.Error()), RetryAfter: max(rl.RetryAfter, time.Millisecond)}
		r.setRefusal(rl.Refusal)
	case errors.As(err, &bz):
		r = Refusal{Status: http.StatusTooManyRequests, Code: "concurrency_limit_exceeded",
			Message: sentence(bz.Error()), RetryAfter: max(bz.RetryAfter, time.Millisecond)}
		r.setRefusal(bz.Refusal)
	case errors.As(err, &bu) && bu.Insufficient():
		r = Refusal{Status: http.StatusTooManyRequests, Code: "budget_insufficient",
			Message: "Not enough left for this request: " + bu.Error() + ". A smaller request (a lower max_tokens, a shorter prompt) fits; this one does not before the reset.", Terminal: true}
		r.setRefusal(bu.Refusal)
	case errors.As(err, &bu):
		r = Refusal{Status: http.StatusTooManyRequests, Code: "budget_exceeded",
			Message: sentence(bu.Error()) + " Do not retry before the reset.", Terminal: true}
		r.setRefusal(bu.Refusal)
	case errors.As(err, &tl):
		r = Refusal{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
			Message:  sentence(tl.Error()) + " Lower max_tokens or shorten the prompt.",
			Terminal: true,
			Limit:    &RefusalLimit{Rule: tl.Rule, Subject: tl.Subject, Metric: string(tl.Metric), Limit: tl.Limit, Requested: tl.Estimate, Source: tl.Source},
			result:   tl.Result}
	case errors.As(err, &se):
		r = Refusal{Status: http.StatusServiceUnavailable, Code: "store_unavailable",
			Message:    "The limit store is unavailable; the request was not admitted. Retry shortly.",
			RetryAfter: time.Second}
	default:
		return Refusal{}, false
	}
	if r.Limit != nil && r.RetryAfter > 0 {
		r.Limit.RetryAfterMS = r.RetryAfter.Milliseconds()
	}
	return r, true
}

// sentence is an error's text as a message's sentence: capitalized, with
// a full stop. The error already names the outcome ("rate limit ...
// reached"), so the message says it once.
func sentence(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

func (r *Refusal) setRefusal(ref sluice.Refusal) {
	r.refusal, r.result = &ref, ref.Result
	r.Limit = &RefusalLimit{Rule: ref.Rule, Subject: ref.Subject, Metric: string(ref.Metric), Limit: ref.Limit,
		Used: ref.Used, Remaining: ref.Remaining, Requested: ref.Requested, RetryAfterMS: ref.RetryAfter.Milliseconds(), Source: ref.Source}
	if !ref.ResetAt.IsZero() {
		r.Limit.ResetAt = ref.ResetAt.UTC().Format(time.RFC3339)
	}
}
