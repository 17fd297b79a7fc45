package retry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Class is what a retry can do about an outcome. The zero value is Success,
// so a zero Decision never causes a retry.
type Class int

const (
	// Success is a response the caller should use: any 1xx, 2xx or 3xx.
	Success Class = iota
	// Transient is a failure that may pass by itself: a connection error, a
	// timeout, an overloaded or failing server. Retry with backoff.
	Transient
	// Throttled is a rate-limit refusal that will succeed later. Retry no
	// earlier than the hint, when there is one.
	Throttled
	// Terminal is a failure no retry can fix: a bad request, a refused key,
	// an exhausted budget or quota, a cancelled call.
	Terminal
)

// String returns the class's name as used in Sluice's metric labels:
// "success", "transient", "throttled" or "terminal".
func (c Class) String() string {
	switch c {
	case Success:
		return "success"
	case Transient:
		return "transient"
	case Throttled:
		return "throttled"
	case Terminal:
		return "terminal"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Decision is the classification of one attempt's outcome.
type Decision struct {
	// Class says whether and how to retry.
	Class Class
	// Hint is how long the server asked the client to wait before trying
	// again. It is meaningful only when HasHint is true; zero then means
	// "now".
	Hint time.Duration
	// HasHint reports whether the response carried a usable retry-after-ms
	// or Retry-After header.
	HasHint bool
	// Reason is a short lowercase phrase naming the signal that decided the
	// class, for logs: "status 503", "x-should-retry: false",
	// "insufficient_quota", "connection error".
	Reason string
}

// Retryable reports whether the decision's class allows another attempt.
// Whether one is made also depends on the [Policy].
func (d Decision) Retryable() bool {
	return d.Class == Transient || d.Class == Throttled
}

// maxPeek is the most of a 429 body that Classify reads to look for a quota
// code. Refusal bodies are a few hundred bytes; a longer one is not JSON we
// understand, and reading it all would hold a stream hostage.
const maxPeek = 64 << 10

// Classify classifies the outcome of one HTTP call: the response and error
// that an [http.Client] or [http.RoundTripper] returned. A non-nil err
// decides alone (see [ClassifyError]); otherwise resp is classified by
// [ClassifyResponse] against the current time. Both nil is Terminal.
//
// For a 429 without an x-should-retry header, Classify reads up to 64 KiB of
// the body to look for a quota code, and puts back what it read: resp.Body
// still yields the whole body and must still be closed by the caller.
func Classify(resp *http.Response, err error) Decision {
	return classifyAt(resp, err, time.Now())
}

// classifyAt is Classify with the time to measure an HTTP-date hint against.
func classifyAt(resp *http.Response, err error, now time.Time) Decision {
	if err != nil {
		return ClassifyError(err)
	}
	if resp == nil {
		// A call that returns neither is broken; calling it again will not mend it.
		return Decision{Class: Terminal, Reason: "no response"}
	}
	var body []byte
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("x-should-retry") == "" {
		body = peekBody(resp)
	}
	return ClassifyResponse(resp.StatusCode, resp.Header, body, now)
}

// ClassifyError classifies a call that returned no usable response.
// context.Canceled is terminal: the caller gave up. A certificate the client
// cannot verify is terminal: it will not verify next time either, and so is a
// request body that [Transport] could not produce again. Every other
// error (connection refused or reset, timeouts including
// context.DeadlineExceeded of a per-attempt deadline, DNS failures, a
// truncated response) is transient.
func ClassifyError(err error) Decision {
	if err == nil {
		return Decision{Class: Success}
	}
	if errors.Is(err, context.Canceled) {
		return Decision{Class: Terminal, Reason: "canceled"}
	}
	if isReplayError(err) {
		return Decision{Class: Terminal, Reason: "request body not replayable"}
	}
	// The library's own refusals, for programs that embed the limiter.
	var rate *sluice.RateLimitError
	var busy *sluice.BusyError
	switch {
	case errors.As(err, &rate):
		return Decision{Class: Throttled, Hint: rate.RetryAfter, HasHint: true, Reason: "rate limited"}
	case errors.As(err, &busy):
		return Decision{Class: Throttled, Hint: busy.RetryAfter, HasHint: true, Reason: "busy"}
	case errors.Is(err, sluice.ErrBudgetExhausted):
		return Decision{Class: Terminal, Reason: "budget exhausted"}
	case errors.Is(err, sluice.ErrTooLarge):
		return Decision{Class: Terminal, Reason: "too large"}
	case errors.Is(err, sluice.ErrStoreUnavailable):
		return Decision{Class: Transient, Reason: "store unavailable"}
	}
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return Decision{Class: Terminal, Reason: "certificate"}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Decision{Class: Transient, Reason: "timeout"}
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return Decision{Class: Transient, Reason: "timeout"}
	}
	return Decision{Class: Transient, Reason: "connection error"}
}

// ClassifyResponse classifies a response from its status, header and body.
// body may be nil or a prefix of the body; it is read only for a 429. now is
// the time an HTTP-date Retry-After is measured from.
//
// The signals are read in this order; the first that applies decides:
//
//  1. A 1xx, 2xx or 3xx status is Success.
//  2. x-should-retry: false is Terminal, whatever the status: the server
//     knows best, and Sluice sends it on every budget, session-ceiling and
//     never-fits refusal.
//  3. x-should-retry: true makes the response retryable whatever the
//     status: Throttled for a 429, Transient otherwise.
//  4. A 429 whose JSON body names a quota or budget error (llm.QuotaCode:
//     insufficient_quota, billing_hard_limit_reached, budget_exceeded,
//     Anthropic's enforced_spend_limit_reached, ...) is Terminal.
//  5. Any other 429 is Throttled, hint or not, but for Anthropic's
//     rate_limit_error without a hint, which is its spend cap (Terminal, by
//     step 4).
//  6. 408, 409, and every 5xx except 501, 505 and 511 are Transient.
//  7. Every other status (400, 401, 403, 404, 413, 422, ...) is Terminal.
//
// A retryable decision carries the server's hint when there is one:
// retry-after-ms (milliseconds, fractions allowed) first, then Retry-After
// (seconds, or an HTTP-date; a date in the past means now). A header that does
// not parse is ignored; a huge one is kept, so the [Policy] gives up rather
// than retry early.
func ClassifyResponse(status int, header http.Header, body []byte, now time.Time) Decision {
	if status < 400 {
		return Decision{Class: Success}
	}
	var d Decision
	switch should := strings.TrimSpace(header.Get("x-should-retry")); {
	case strings.EqualFold(should, "false"):
		return Decision{Class: Terminal, Reason: "x-should-retry: false"}
	case strings.EqualFold(should, "true"):
		d = Decision{Class: Transient, Reason: "x-should-retry: true"}
		if status == http.StatusTooManyRequests {
			d.Class = Throttled
		}
	case status == http.StatusTooManyRequests:
		_, hinted := parseHint(header, now)
		if code := llm.QuotaCode(status, hinted, body); code != "" {
			return Decision{Class: Terminal, Reason: code}
		}
		d = Decision{Class: Throttled, Reason: "status 429"}
	case transientStatus(status):
		d = Decision{Class: Transient, Reason: "status " + strconv.Itoa(status)}
	default:
		return Decision{Class: Terminal, Reason: "status " + strconv.Itoa(status)}
	}
	d.Hint, d.HasHint = parseHint(header, now)
	return d
}

// transientStatus reports whether an error status may clear by itself.
func transientStatus(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict:
		return true
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported, http.StatusNetworkAuthenticationRequired:
		return false
	}
	return status >= 500 && status <= 599
}

// parseHint reads the server's wait: retry-after-ms, then Retry-After.
func parseHint(header http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(header.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return floatDuration(ms, time.Millisecond), true
		}
	}
	v := strings.TrimSpace(header.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs >= 0 {
			return floatDuration(secs, time.Second), true
		}
		return 0, false
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// floatDuration converts n units to a Duration, saturating instead of
// overflowing. n is not negative; NaN never gets here (NaN >= 0 is false).
func floatDuration(n float64, unit time.Duration) time.Duration {
	ns := n * float64(unit)
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Ceil(ns))
}

// peekBody reads the start of resp.Body and puts it back, so the caller
// still reads the whole body.
func peekBody(resp *http.Response) []byte {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	prefix, _ := io.ReadAll(io.LimitReader(resp.Body, maxPeek))
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(prefix), resp.Body), Closer: resp.Body}
	return prefix
}

// peekedBody is a response body whose start was read and put back.
type peekedBody struct {
	io.Reader
	io.Closer
}
