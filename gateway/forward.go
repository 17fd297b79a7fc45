package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
	"github.com/valyala/fasthttp"
)

// forward sends the admitted request to cand's provider, retrying 429s,
// 5xx and connection errors while nothing has reached the client, and
// answers the client. It reports whether the client was answered; when not,
// err says why the provider failed, and the caller may try a fallback.
func (c *call) forward(cand *model, res *sluice.Reservation, capPer int64, clamped bool) (answered bool, err error) {
	g := c.g
	p := cand.provider
	c.capPer = capPer
	c.event.Model, c.event.Provider = cand.Name, p.Name
	body, injected := c.upstreamBody(cand, capPer, clamped)
	apiKey := p.APIKey
	if c.ownKey != "" {
		apiKey = c.ownKey
	}
	uc := p.conns.get()
	if uc == nil {
		return false, errUpstream(502, fasthttp.ErrNoFreeConns)
	}
	// A client that closes its connection while the provider works has
	// the upstream call cancelled: its connection is closed.
	var watch *clientWatch
	if conn := c.ctx.Conn(); conn != nil {
		watch = watchClient(conn, clientWatchDelay, func() {
			c.gone.Store(true)
			uc.abort()
		})
	}
	streaming := false
	c.upstreamStart = time.Time{}
	c.event.UpstreamStatus, c.event.Upstream = 0, 0
	defer func() {
		if !streaming { // a stream gives both back when its body closes
			p.conns.put(uc, watch.stop())
			c.upstreamDone()
		}
	}()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	p.prepare(req, &c.ctx.Request.Header, c.rt.path, cand.UpstreamName, body, apiKey, c.bound.Stream)
	// The provider's log can name the call as Sluice's does.
	req.Header.Set(HeaderRequestID, c.event.RequestID)
	if p.Kind == KindOpenAI {
		req.Header.Set("X-Client-Request-Id", c.event.RequestID)
	}
	c.trace.startUpstream(req, c.rt, cand, c.bound.Model, clamped)
	defer func() {
		if !streaming { // a stream's span ends with the stream
			c.trace.endUpstream(c.event.UpstreamStatus, cand.Name, c.event.Attempts, c.upstreamUsage, c.upstreamReported, causeOf(err))
		}
	}()
	deadline := c.deadline
	resp := fasthttp.AcquireResponse()
	pc := p.pacerFor(cand.UpstreamName)
	for attempt := 1; ; attempt++ {
		if c.gone.Load() {
			err = errClientGone()
			break
		}
		if attempt == 1 && !time.Now().Before(deadline) {
			// The call waited (for the key store, the limit store, a
			// queue) past its deadline: sent now it could only time out,
			// charged. It is released instead.
			err = errDeadlinePassed()
			break
		}
		if p.Pace {
			if err = c.pace(pc, cand, capPer); err != nil {
				break
			}
		}
		c.event.Attempts++
		if c.upstreamStart.IsZero() {
			c.upstreamStart = time.Now()
		}
		// Only a streamed call's answer is read as it comes; any other
		// is read whole by the client, with no stream to wrap it.
		resp.StreamBody = c.bound.Stream
		err = uc.client.DoDeadline(req, resp, deadline)
		c.event.UpstreamStatus = 0
		if err == nil {
			c.event.UpstreamStatus = resp.StatusCode()
		}
		if err != nil && c.gone.Load() {
			c.cut = true // the client left while the provider worked
		}
		c.event.UpstreamStatus = 0
		if err == nil {
			c.event.UpstreamStatus = resp.StatusCode()
		}
		if !c.gone.Load() {
			g.noteUpstream(p, err, c.event.UpstreamStatus)
		}
		if err == nil {
			pc.observe(time.Now(), &resp.Header, resp.StatusCode())
			// Rules name the model as clients do (Identity.Model), not
			// by its name upstream.
			g.limiter.SetProviderLimits(cand.Name, pc.limits())
		}
		status := resp.StatusCode()
		retryable := err != nil || status == 429 || status >= 500
		if err == nil && retryable && c.isQuota(resp) {
			retryable = false
		}
		if !retryable {
			break
		}
		if attempt > g.opts.UpstreamRetries || time.Now().Add(g.opts.RetryMax).After(deadline) {
			break
		}
		wait := backoff(attempt, g.opts.RetryBase, g.opts.RetryMax)
		if err == nil {
			if hint, ok := retryHint(&resp.Header, time.Now()); ok {
				if hint > g.opts.RetryMax || time.Now().Add(hint).After(deadline) {
					// Longer than the gateway waits: the 429 (or 503)
					// goes to the next candidate or the client with its
					// hint, rather than retried early here and again
					// by the client.
					break
				}
				wait = hint
			}
			_ = resp.CloseBodyStream()
		}
		time.Sleep(wait)
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		if c.gone.Load() {
			return false, errClientGone()
		}
		var ae *apiError
		if errors.As(err, &ae) {
			return false, err // paced, or past its deadline: refused before the provider was called
		}
		if errors.Is(err, fasthttp.ErrTimeout) {
			c.cut = true
			if c.session.endsCall {
				return false, errWallClockReached(c.session.id)
			}
			return false, errUpstream(504, err)
		}
		return false, errUpstream(502, err)
	}
	status := resp.StatusCode()
	if status != 200 && c.isQuota(resp) {
		c.passOn(resp, true)
		c.setResultHeaders(&c.ctx.Response.Header, cand, res, capPer, clamped)
		fasthttp.ReleaseResponse(resp)
		c.finishRefused(cand, res)
		return true, nil
	}
	if (status == 401 || status == 403) && c.ownKey == "" {
		// The operator's provider key was refused: not the client's
		// Sluice key, which a 401 would tell it. The next candidate, on
		// another provider, may still serve.
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		c.g.log.Error("provider refused the gateway's key", "request_id", c.event.RequestID, "provider", p.Name, "model", cand.Name, "status", status)
		return false, errProviderAuth(p.Name, status)
	}
	if status == 429 || status >= 500 {
		// Spent: let a fallback try before the client hears of it.
		if cand != c.lastCandidate() {
			_ = resp.CloseBodyStream()
			fasthttp.ReleaseResponse(resp)
			return false, errUpstream(502, fmt.Errorf("provider answered %d", status))
		}
	}
	if status != 200 {
		c.passOn(resp, false)
		c.setResultHeaders(&c.ctx.Response.Header, cand, res, capPer, clamped)
		fasthttp.ReleaseResponse(resp)
		c.finishRefused(cand, res)
		return true, nil
	}
	h := &c.ctx.Response.Header
	copyHeaders(h, &resp.Header)
	c.setResultHeaders(h, cand, res, capPer, clamped)
	c.event.Model = cand.Name
	c.event.Outcome = "admitted"
	if c.bound.Stream && c.rt.stream != nil && isEventStream(&resp.Header) {
		streaming = true
		if err := c.stream(cand, res, resp, injected, uc, watch); err != nil {
			// The provider may have done the work: the reservation is
			// charged, and no fallback is tried.
			c.cut = true
			c.event.Outcome = "upstream_error"
			return false, errUpstream(502, fmt.Errorf("provider stream failed before its first event: %w", err))
		}
		return true, nil
	}
	out := resp.Body()
	c.trace.firstToken()
	c.ctx.SetStatusCode(200)
	c.ctx.SetBody(out)
	u, ok := c.rt.usage(out)
	c.setCostHeader(h, cand, u, ok)
	c.upstreamUsage, c.upstreamReported = u, ok
	_ = resp.CloseBodyStream()
	fasthttp.ReleaseResponse(resp)
	c.settle = func() { c.finish(cand, res, u, ok) }
	return true, nil
}

// upstreamDone records the time spent on the provider, once its answer
// has been read (or has failed).
func (c *call) upstreamDone() {
	if !c.upstreamStart.IsZero() {
		c.event.Upstream = time.Since(c.upstreamStart)
	}
}

func (c *call) lastCandidate() *model {
	m := c.model
	if len(m.fallbacks) > 0 {
		return m.fallbacks[len(m.fallbacks)-1]
	}
	return m
}

// isQuota reads an upstream error body and reports whether it is the
// provider's quota-exhausted error, which waiting does not clear: OpenAI's
// is a 429, Anthropic's a 400 (credit balance) or a billing_error.
func (c *call) isQuota(resp *fasthttp.Response) bool {
	if resp.StatusCode() < 400 {
		return false
	}
	body := resp.Body()
	if c.rt.anthropic {
		return anthropic.IsQuotaError(resp.StatusCode(), body)
	}
	return openai.IsQuotaError(resp.StatusCode(), body)
}

// passOn answers the client with the provider's own error response.
func (c *call) passOn(resp *fasthttp.Response, terminal bool) {
	body := resp.Body()
	h := &c.ctx.Response.Header
	copyHeaders(h, &resp.Header)
	c.ctx.SetStatusCode(resp.StatusCode())
	c.ctx.SetBody(body)
	if terminal {
		h.Set("x-should-retry", "false")
		if resp.StatusCode() == 429 {
			c.ctx.SetStatusCode(terminalStatus(c.ctx))
		}
	}
	_ = resp.CloseBodyStream()
	c.event.Outcome, c.event.Class = "upstream_error", "transient"
	if terminal || resp.StatusCode() < 500 && resp.StatusCode() != 429 {
		c.event.Class = "terminal"
	}
}

// finishRefused releases the reservation of a call the provider refused:
// the model did no work.
func (c *call) finishRefused(cand *model, res *sluice.Reservation) {
	if err := res.Release(context.Background()); err != nil {
		c.g.log.Error("release failed", "request_id", c.event.RequestID, "route", c.rt.name, "model", cand.Name, "err", err)
	}
	c.settleSession(sluice.Usage{}, true)
}

// copyHeaders copies a provider's response headers but the hop-by-hop
// ones and Sluice's own; the provider's request ID is kept as
// X-Upstream-Request-Id, beside Sluice's.
func copyHeaders(dst *fasthttp.ResponseHeader, src *fasthttp.ResponseHeader) {
	for k, v := range src.All() {
		switch {
		case hopByHop[string(k)]:
		case string(k) == HeaderRequestID || string(k) == headerAnthropicRequestID:
			// OpenAI's x-request-id, Anthropic's request-id.
			dst.SetBytesV("X-Upstream-Request-Id", v)
		default:
			// fasthttp read k in its canonical form (or left a name with
			// a space as it came): no need to work it out again.
			dst.SetCanonical(k, v)
		}
	}
}

func isEventStream(h *fasthttp.ResponseHeader) bool {
	ct := h.ContentType()
	return len(ct) >= 17 && string(ct[:17]) == "text/event-stream"
}

// closeStream stops reading an upstream stream, closing its connection:
// the provider sees the call cancelled.
func closeStream(upstream io.Reader, why error) {
	if s, ok := upstream.(fasthttp.ReadCloserWithError); ok {
		_ = s.CloseWithError(why)
	}
}
