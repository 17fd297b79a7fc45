package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MiddlewareOptions configures Middleware.
type MiddlewareOptions struct {
	// Request builds the admission of an HTTP request: who pays, from a
	// trusted source (an authenticated session, a verified header), never
	// from the request body; and what the call may cost. An error answers
	// 400 with the error's text. Required.
	Request func(*http.Request) (Request, error)
	// OnRefusal, if set, answers a request that Admit did not admit, in
	// place of WriteRefusal. It receives Admit's error.
	OnRefusal func(http.ResponseWriter, *http.Request, error)
	// OnSettleError, if set, is called when the reservation of a finished
	// request cannot be settled or released (a store error). The sweep then
	// settles it at its deadline.
	OnSettleError func(*http.Request, error)
}

type reservationKey struct{}

// ReservationFrom returns the reservation that Middleware made for the
// request whose context is ctx, or nil. The handler may Settle it with the
// usage it observed; Middleware settles whatever is left when the handler
// returns.
func ReservationFrom(ctx context.Context) *Reservation {
	r, _ := ctx.Value(reservationKey{}).(*Reservation)
	return r
}

// Middleware admits every request through l before the handler runs. The
// admission comes from opts.Request; a request that is not admitted never
// reaches the handler and is answered by opts.OnRefusal, or WriteRefusal.
// An admitted request carries its Reservation in its context (see
// ReservationFrom) and the X-RateLimit fields of the rule with the least
// room on its response. When the handler returns, the reservation is
// settled as it stands unless the handler settled it; when the handler
// panics, it is released and the panic goes on.
//
// Middleware panics if l or opts.Request is nil: that is a wiring mistake,
// caught at start-up.
func Middleware(l *Limiter, opts MiddlewareOptions) func(http.Handler) http.Handler {
	if l == nil || opts.Request == nil {
		panic("sluice: Middleware needs a Limiter and MiddlewareOptions.Request")
	}
	onRefusal := opts.OnRefusal
	if onRefusal == nil {
		onRefusal = func(w http.ResponseWriter, _ *http.Request, err error) { writeRefusal(w, err, l.clock.Now()) }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, err := opts.Request(r)
			if err != nil {
				writeJSONError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
				return
			}
			res, err := l.Admit(r.Context(), req)
			if err != nil {
				onRefusal(w, r, err)
				return
			}
			res.Result().SetHeaders(w.Header(), l.clock.Now())
			finished := false
			defer func() {
				// Settle or release even when the client is gone.
				ctx := context.WithoutCancel(r.Context())
				var err error
				if finished {
					err = res.Settle(ctx, Usage{})
				} else {
					// The handler panicked (or called runtime.Goexit):
					// the call may never have been made. The panic goes
					// on once this returns.
					err = res.Release(ctx)
				}
				if err != nil && opts.OnSettleError != nil {
					opts.OnSettleError(r, err)
				}
			}()
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reservationKey{}, res)))
			finished = true
		})
	}
}

// HTTPRefusal is how a refusal is answered over HTTP: the status, the retry
// signals, and what the body says. Middleware and the SDK wrappers answer
// with it, each writing the body in the error shape of its API.
type HTTPRefusal struct {
	// Status is 429 (rate limit, busy, budget), 413 (never fits) or 503
	// (store unavailable).
	Status int
	// Code names the outcome: rate_limit_exceeded,
	// concurrency_limit_exceeded, budget_exceeded, request_too_large or
	// store_unavailable.
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
	refusal *Refusal
	// result is the room of every rule the refused admission looked at,
	// for the fields of the rules with the least; nil when the store was
	// not asked.
	result *Result
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
	// Source says where Limit came from (see Refusal.Source).
	Source string `json:"source,omitempty"`
}

// HTTPRefusalOf maps an error from Admit to its HTTP answer. ok is false for
// an error that is not a refusal (the context's error, invalid usage).
func HTTPRefusalOf(err error) (r HTTPRefusal, ok bool) {
	var (
		rl *RateLimitError
		bz *BusyError
		bu *BudgetError
		tl *TooLargeError
		se *StoreError
	)
	switch {
	case errors.As(err, &rl):
		r = HTTPRefusal{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded",
			Message: sentence(rl.Error()), RetryAfter: max(rl.RetryAfter, time.Millisecond)}
		r.setRefusal(rl.Refusal)
	case errors.As(err, &bz):
		r = HTTPRefusal{Status: http.StatusTooManyRequests, Code: "concurrency_limit_exceeded",
			Message: sentence(bz.Error()), RetryAfter: max(bz.RetryAfter, time.Millisecond)}
		r.setRefusal(bz.Refusal)
	case errors.As(err, &bu) && bu.Insufficient():
		r = HTTPRefusal{Status: http.StatusTooManyRequests, Code: "budget_insufficient",
			Message: "Not enough left for this request: " + bu.Error() + ". A smaller request (a lower max_tokens, a shorter prompt) fits; this one does not before the reset.", Terminal: true}
		r.setRefusal(bu.Refusal)
	case errors.As(err, &bu):
		r = HTTPRefusal{Status: http.StatusTooManyRequests, Code: "budget_exceeded",
			Message: sentence(bu.Error()) + " Do not retry before the reset.", Terminal: true}
		r.setRefusal(bu.Refusal)
	case errors.As(err, &tl):
		r = HTTPRefusal{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
			Message:  sentence(tl.Error()) + " Lower max_tokens or shorten the prompt.",
			Terminal: true,
			Limit:    &RefusalLimit{Rule: tl.Rule, Subject: tl.Subject, Metric: string(tl.Metric), Limit: tl.Limit, Requested: tl.Estimate, Source: tl.Source},
			result:   tl.Result}
	case errors.As(err, &se):
		r = HTTPRefusal{Status: http.StatusServiceUnavailable, Code: "store_unavailable",
			Message:    "The limit store is unavailable; the request was not admitted. Retry shortly.",
			RetryAfter: time.Second}
	default:
		return HTTPRefusal{}, false
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

func (r *HTTPRefusal) setRefusal(ref Refusal) {
	r.refusal, r.result = &ref, ref.Result
	r.Limit = &RefusalLimit{Rule: ref.Rule, Subject: ref.Subject, Metric: string(ref.Metric), Limit: ref.Limit,
		Used: ref.Used, Remaining: ref.Remaining, Requested: ref.Requested, RetryAfterMS: ref.RetryAfter.Milliseconds(), Source: ref.Source}
	if !ref.ResetAt.IsZero() {
		r.Limit.ResetAt = ref.ResetAt.UTC().Format(time.RFC3339)
	}
}

// HeaderSetter is what SetHeaders writes through: an http.Header, or
// another server's response header (fasthttp's) with the same two methods.
type HeaderSetter interface {
	Set(name, value string)
	Add(name, value string)
}

// SetHeaders writes the refusal's headers on h: Retry-After and
// retry-after-ms when there is a wait, x-should-retry: false when terminal,
// and the X-RateLimit and IETF RateLimit fields of the deciding rule, reset
// counted from now. It is the one place a refusal's headers are made, for
// the middleware, the SDK wrappers and the gateway.
func (r *HTTPRefusal) SetHeaders(h HeaderSetter, now time.Time) {
	switch {
	case r.refusal != nil:
		setLimitHeaders(h, r.refusal.headroom(), now)
	case r.result != nil && r.result.Rule != "":
		// Never fits: the fields describe the rule the request never
		// fits, as its body does, however much room it has.
		setLimitHeaders(h, r.result.Headroom, now)
	}
	if r.result != nil {
		setOpenAILimitHeaders(h, openAIRequestHeaders, r.result.Requests, now)
		setOpenAILimitHeaders(h, openAITokenHeaders, r.result.Tokens, now)
	}
	if r.RetryAfter > 0 {
		secs := (r.RetryAfter + time.Second - 1) / time.Second
		h.Set("Retry-After", strconv.FormatInt(int64(secs), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(r.RetryAfter.Milliseconds(), 10))
	}
	if r.Terminal {
		h.Set("X-Should-Retry", "false")
	}
}

// SetHeaders writes the admission's headers on h: the X-RateLimit and IETF
// RateLimit fields of the rule with the least room (reset counted from
// now), OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} for
// the request and token rules with the least room, and one
// X-Sluice-Budget-Warning per warning.
func (r Result) SetHeaders(h HeaderSetter, now time.Time) {
	if r.Rule != "" {
		setLimitHeaders(h, r.Headroom, now)
	}
	setOpenAILimitHeaders(h, openAIRequestHeaders, r.Requests, now)
	setOpenAILimitHeaders(h, openAITokenHeaders, r.Tokens, now)
	for _, w := range r.Warnings {
		v := w.Rule + "; used=" + strconv.FormatInt(w.Used, 10) + "; limit=" + strconv.FormatInt(w.Limit, 10)
		if w.Soft {
			v += "; soft"
		} else {
			v += "; threshold=" + strconv.FormatFloat(w.Threshold, 'g', -1, 64)
		}
		h.Add("X-Sluice-Budget-Warning", v)
	}
}

// WriteRefusal is Middleware's default answer to a request Admit did not
// admit: the status and headers of HTTPRefusalOf and a small JSON body
// {"error":{"code","message","limit"}} naming the rule. An error that is no
// refusal answers 500.
func WriteRefusal(w http.ResponseWriter, r *http.Request, err error) {
	writeRefusal(w, err, time.Now())
}

func writeRefusal(w http.ResponseWriter, err error, now time.Time) {
	ref, ok := HTTPRefusalOf(err)
	if !ok {
		writeJSONError(w, http.StatusInternalServerError, "internal_error", "The request could not be admitted.", nil)
		return
	}
	ref.SetHeaders(w.Header(), now)
	writeJSONError(w, ref.Status, ref.Code, ref.Message, ref.Limit)
}

type jsonError struct {
	Error jsonErrorDetail `json:"error"`
}

type jsonErrorDetail struct {
	Code    string        `json:"code"`
	Message string        `json:"message"`
	Limit   *RefusalLimit `json:"limit,omitempty"`
}

func writeJSONError(w http.ResponseWriter, status int, code, message string, limit *RefusalLimit) {
	body, err := json.Marshal(jsonError{jsonErrorDetail{Code: code, Message: message, Limit: limit}})
	if err != nil { // strings and integers always encode
		body = fmt.Appendf(nil, `{"error":{"code":%q}}`, code)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
