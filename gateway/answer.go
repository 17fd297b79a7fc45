package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/valyala/fasthttp"
)

// Response headers of an admission by rules with priority classes: one of
// each per class rule.
const (
	// HeaderClass names the request's class on a class rule, its floor,
	// its share and the rule's capacity:
	// "batch; rule=model-calls; floor=1; share=1; capacity=2".
	HeaderClass = "X-Sluice-Class"
	// HeaderClassBorrowedFrom names the class whose idle share admitted
	// the request, when its own was full: "interactive; rule=model-calls".
	HeaderClassBorrowedFrom = "X-Sluice-Class-Borrowed-From"
)

// Outcomes of a call, for metrics and logs (Event.Outcome); the refusals'
// are outcomeOf's.
const (
	outcomeAdmitted      = "admitted"
	outcomeUpstreamError = "upstream_error"
	outcomeClientGone    = "client_gone"
)

// answer answers the client with what the provider said in x.resp, and
// sets how the call ends; or returns the error that sends the call to the
// next candidate, unanswered: the operator's provider key refused, or a
// rate limit or 5xx of a provider with a fallback after it.
func (c *call) answer(x *exchange, adm *admission) error {
	resp, cand := x.resp, adm.model
	status := resp.StatusCode()
	switch {
	case status == 200:
	case x.quota != "":
		c.passOn(x, adm, true)
		return nil
	case (status == 401 || status == 403) && c.ownKey == "":
		// The operator's provider key was refused: not the client's
		// Sluice key, which a 401 would tell it. The next candidate, on
		// another provider, may still serve.
		c.g.log.Error("provider refused the gateway's key", "request_id", c.event.RequestID, "provider", x.p.Name, "model", cand.Name, "status", status)
		return errProviderAuth(x.p.Name, status)
	case (status == 429 || status >= 500) && !c.lastTry:
		// Spent: let a fallback try before the client hears of it.
		return errUpstream(502, fmt.Errorf("provider answered %d", status))
	case status < 400:
		// A redirect (or any other answer that is neither the model's
		// nor an error) is not passed on: a client that followed its
		// Location would send the prompt, and its key, elsewhere.
		return errUpstream(502, fmt.Errorf("provider answered %d %q, which the gateway does not pass on", status, resp.Header.Peek("Location")))
	default:
		c.passOn(x, adm, false)
		return nil
	}
	h := &c.ctx.Response.Header
	copyHeaders(h, &resp.Header)
	c.setResultHeaders(h, adm)
	c.event.Model = cand.Name
	c.event.Outcome = outcomeAdmitted
	if c.bound.Stream && c.rt.stream != nil && isEventStream(&resp.Header) {
		if err := c.stream(x, adm); err != nil {
			// The provider may have done the work: the reservation is
			// charged, and no fallback is tried.
			c.cut = true
			c.event.Outcome = outcomeUpstreamError
			return errUpstream(502, fmt.Errorf("provider stream failed before its first event: %w", err))
		}
		return nil
	}
	out := resp.Body()
	c.trace.firstToken()
	c.ctx.SetStatusCode(200)
	c.ctx.SetBody(out)
	u, ok := c.rt.usage(out)
	c.setCostHeader(h, adm, u, ok)
	c.upstreamUsage, c.upstreamReported = u, ok
	c.adm, c.ending, c.usage, c.reported = adm, endCharge, u, ok
	return nil
}

// passOn answers the client with the provider's own error answer, and
// ends the call with its reservation released: the model did no work. A
// terminal one (a quota) is marked so, as Sluice's budget refusals are.
func (c *call) passOn(x *exchange, adm *admission, terminal bool) {
	resp := x.resp
	h := &c.ctx.Response.Header
	copyHeaders(h, &resp.Header)
	c.ctx.SetStatusCode(resp.StatusCode())
	if body := resp.Body(); json.Valid(body) {
		c.ctx.SetBody(body)
	} else {
		// An error page from a proxy in front of the provider, or a
		// provider that does not speak JSON: the client gets the API's
		// error shape, with the provider's status.
		c.g.writeError(c.ctx, c.rt, errNotJSON(resp.StatusCode()))
	}
	if terminal {
		h.Set("x-should-retry", "false")
		if resp.StatusCode() == 429 {
			c.ctx.SetStatusCode(terminalStatus(c.ctx))
		}
	}
	c.event.Outcome, c.event.Class = outcomeUpstreamError, "transient"
	if terminal || resp.StatusCode() < 500 && resp.StatusCode() != 429 {
		c.event.Class = "terminal"
	}
	c.setResultHeaders(h, adm)
	c.adm, c.ending = adm, endRelease
}

// errNotJSON is a provider's error answer whose body is not JSON, in the
// API's error shape with the provider's status.
func errNotJSON(status int) *apiError {
	e := &apiError{status: status, typ: "server_error", anthType: "api_error", code: "upstream_error",
		message: fmt.Sprintf("The provider answered %d with a body that is not JSON.", status)}
	if status < 500 && status != 429 {
		e.typ, e.anthType = "invalid_request_error", "invalid_request_error"
	}
	if status == 429 {
		e.typ, e.anthType = "rate_limit_error", "rate_limit_error"
	}
	return e
}

// setResultHeaders writes the admission's headers on a response.
func (c *call) setResultHeaders(h *fasthttp.ResponseHeader, adm *admission) {
	r := adm.res.Result()
	c.event.Shadowed, c.event.FailedOpen, c.event.BudgetWarnings = r.Shadowed, r.FailedOpenRules, r.Warnings
	sluicehttp.SetHeaders(canonicalHeaders{h}, r, c.g.now())
	canonicalHeaders{h}.Set(headerModel, adm.model.Name)
	for _, cs := range r.Classes {
		h.Add(HeaderClass, fmt.Sprintf("%s; rule=%s; floor=%d; share=%d; capacity=%d", cs.Class, cs.Rule, cs.Floor, cs.Share, cs.Capacity))
		if cs.BorrowedFrom != "" {
			h.Add(HeaderClassBorrowedFrom, cs.BorrowedFrom+"; rule="+cs.Rule)
		}
	}
	if r.FailedOpen {
		// The limit store did not answer and every rule in play says
		// on_store_error: open: admitted uncharged.
		h.Set("X-Sluice-Fail-Open", "true")
	}
	if adm.clamped {
		h.Set("X-Sluice-Output-Cap", strconv.FormatInt(adm.capPer, 10))
	}
}

// refuse answers the client with err, a refusal or a failure the call
// could not get past: in the error shape of its route, with the hints that
// help the client act on it and the room its rules have left.
func (c *call) refuse(err error) {
	err = c.withWaitHint(c.withFitHint(err))
	c.event.Outcome, c.event.Class = outcomeOf(err)
	c.event.RefusedClass = refusedClass(err)
	c.event.Cause = causeOf(err)
	c.withRoom(err)
	c.g.writeError(c.ctx, c.rt, err)
}

// fitHint is a refusal by a budget with room left, less than the request
// may use, with the largest max_tokens that would fit.
type fitHint struct {
	error
	maxTokens int64
}

func (f *fitHint) Unwrap() error { return f.error }

// withFitHint adds to a refusal by a token budget with room left the
// largest output cap that fits it now (per completion).
func (c *call) withFitHint(err error) error {
	var bu *sluice.BudgetError
	if !errors.As(err, &bu) || !bu.Insufficient() {
		return err
	}
	left := bu.Remaining
	switch bu.Metric {
	case sluice.MetricTokens:
		left -= c.bound.InputTokens
	case sluice.MetricOutputTokens:
	default:
		return err
	}
	if per := left / max(c.bound.N, 1); per > 0 {
		return &fitHint{error: err, maxTokens: per}
	}
	return err
}

// withRoom gives a refusal the gateway makes itself after authentication
// (a session's ceiling, a paced provider, a body too large, an upstream
// failure, a bad request) the rate-limit fields of the caller's rules, read
// from the store without charging, as a request that never fits gets
// them: an admission made before the refusal has been released by then,
// so the figures are what the caller has left. A refusal by a limit has
// its own; a client that left reads nothing; a store that does not answer
// leaves the fields out.
func (c *call) withRoom(err error) {
	if c.authenticated {
		c.g.withRoom(err, c.identity(c.tried))
	}
}

// withRoom gives err, the gateway's own refusal of a caller whose key is
// known, the room of the rules that apply to id (see call.withRoom).
func (g *Gateway) withRoom(err error, id sluice.Identity) {
	var ae *apiError
	if !errors.As(err, &ae) || ae.room != nil || ae.status == 499 {
		return
	}
	if room, err := g.limiter.Room(context.Background(), sluice.Request{Identity: id}); err == nil {
		ae.room = &room
	}
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
