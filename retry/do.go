package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// maxDrain is the most of a discarded body read before closing it, so the
// connection can be reused; a longer body costs more to read than a new
// connection.
const maxDrain = 4 << 10

// Do calls call until it succeeds, fails terminally, or p says to stop, and
// returns the last attempt's response and error unchanged. Each retry waits
// as [Policy.Delay] says; the body of every discarded response is drained
// and closed, so the returned response is the only one the caller closes.
//
// Do stops without waiting when the wait would end after ctx's deadline,
// returning the last outcome. If ctx is done during a wait, Do returns a nil
// response and an error that matches ctx.Err() with errors.Is (and the last
// attempt's error, if it had one). call receives ctx and should pass it on to
// the request.
func Do(ctx context.Context, p Policy, call func(ctx context.Context) (*http.Response, error)) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := call(ctx)
		if ctx.Err() != nil {
			// The caller has given up; what it gets is the call's own answer.
			return resp, err
		}
		d := classifyAt(resp, err, p.now())
		delay, ok := p.Delay(attempt, d)
		if !ok {
			return resp, err
		}
		if deadline, has := ctx.Deadline(); has && time.Until(deadline) < delay {
			return resp, err
		}
		discard(resp)
		if p.OnRetry != nil {
			p.OnRetry(attempt, d, delay)
		}
		if waitErr := p.wait(ctx, delay); waitErr != nil {
			if err != nil {
				return nil, fmt.Errorf("retry: waiting %v after attempt %d (%s): %w: %w", delay, attempt, d.Reason, waitErr, err)
			}
			return nil, fmt.Errorf("retry: waiting %v after attempt %d (%s): %w", delay, attempt, d.Reason, waitErr)
		}
	}
}

// discard drains a little of a response body and closes it.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
}

// Transport is an [http.RoundTripper] that retries under Policy the requests
// it can replay: those without a body, and those whose GetBody can produce
// the body again (as [http.NewRequest] sets for bytes, strings and buffers).
// A request with a body it cannot replay is sent once. Terminal outcomes are
// never retried. The request's context bounds the waits, as in [Do].
//
// A client SDK that retries by itself (the official OpenAI and Anthropic Go
// SDKs do, twice by default) multiplies its attempts by these; set its
// retries to zero when it sends through a Transport.
//
// The zero value sends through [http.DefaultTransport] under the zero Policy.
// A Transport is safe for concurrent use if its Base and Policy hooks are.
type Transport struct {
	// Base sends each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper
	// Policy says how often and how long to retry.
	Policy Policy
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip sends req, retrying as the Transport's Policy allows.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base()
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return base.RoundTrip(req)
	}
	attempt := 0
	return Do(req.Context(), t.Policy, func(ctx context.Context) (*http.Response, error) {
		attempt++
		if attempt == 1 {
			return base.RoundTrip(req)
		}
		again := req.Clone(ctx)
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, &replayError{err: err}
			}
			again.Body = body
		}
		return base.RoundTrip(again)
	})
}

// CloseIdleConnections closes the idle connections of Base, if it keeps any,
// so [http.Client.CloseIdleConnections] reaches through the Transport.
func (t *Transport) CloseIdleConnections() {
	if closer, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		closer.CloseIdleConnections()
	}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

// replayError is a request body that could not be produced again. It is
// terminal: GetBody failing once says nothing good about the next time.
type replayError struct {
	err error
}

func (e *replayError) Error() string { return "retry: replaying request body: " + e.err.Error() }
func (e *replayError) Unwrap() error { return e.err }

// isReplayError reports whether err is a failure to replay a request body.
func isReplayError(err error) bool {
	var replay *replayError
	return errors.As(err, &replay)
}
