// Package sluicehttp answers over HTTP for a sluice.Limiter: a net/http
// middleware that admits every request, the mapping of a refusal to its
// status, headers and body, and the rate-limit header fields of every
// answer, admitted or refused.
package sluicehttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// Options configures Middleware.
type Options struct {
	// Request builds the admission of an HTTP request: who pays, from a
	// trusted source (an authenticated session, a verified header), never
	// from the request body; and what the call may cost. An error answers
	// 400 with the error's text. Required.
	Request func(*http.Request) (sluice.Request, error)
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
func ReservationFrom(ctx context.Context) *sluice.Reservation {
	r, _ := ctx.Value(reservationKey{}).(*sluice.Reservation)
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
func Middleware(l *sluice.Limiter, opts Options) func(http.Handler) http.Handler {
	if l == nil || opts.Request == nil {
		panic("sluicehttp: Middleware needs a Limiter and Options.Request")
	}
	onRefusal := opts.OnRefusal
	if onRefusal == nil {
		onRefusal = func(w http.ResponseWriter, _ *http.Request, err error) { writeRefusal(w, err, l.Now()) }
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
			SetHeaders(w.Header(), res.Result(), l.Now())
			finished := false
			defer func() {
				// Settle or release even when the client is gone.
				ctx := context.WithoutCancel(r.Context())
				var err error
				if finished {
					err = res.Settle(ctx, sluice.Usage{})
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

// WriteRefusal is Middleware's default answer to a request Admit did not
// admit: the status and headers of RefusalOf and a small JSON body
// {"error":{"code","message","limit"}} naming the rule. An error that is no
// refusal answers 500.
func WriteRefusal(w http.ResponseWriter, r *http.Request, err error) {
	writeRefusal(w, err, time.Now())
}

func writeRefusal(w http.ResponseWriter, err error, now time.Time) {
	ref, ok := RefusalOf(err)
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
