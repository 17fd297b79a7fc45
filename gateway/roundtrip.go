package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/openai"
	"github.com/sluicehq/sluice/retry"
	"github.com/valyala/fasthttp"
)

// exchange is a call's use of one provider: the upstream connection, the
// watch on the client's connection meanwhile, and the provider's answer.
// Whoever holds it last closes it: the round trip, the answer, or the
// stream the answer becomes.
type exchange struct {
	p     *provider
	dep   *deployment
	uc    *upstreamConn
	watch *clientWatch
	resp  *fasthttp.Response
	// quota is the provider's quota or spend-cap code in an error answer
	// (llm.QuotaCode), which no wait clears.
	quota string
	// injected is set when the gateway asked for the usage chunk of a
	// stream the client did not ask for it in.
	injected bool
}

// close gives the connection back and releases the answer. The watch has
// stopped; left says whether the client left, with the connection closed
// under the provider's call.
func (x *exchange) close(left bool) {
	if x.resp != nil {
		fasthttp.ReleaseResponse(x.resp)
		x.resp = nil
	}
	x.p.conns.put(x.uc, left)
}

// forward sends the admitted call to deployment d, retrying what may clear
// while nothing has reached the client, and answers the client. nil: the
// client was answered, and c.ending says how the call ends. An error: it
// was not; c.cut says whether the provider may have done the work, and
// the caller may try a fallback.
func (c *call) forward(adm *admission, d *deployment) error {
	cand, p := adm.model, d.provider
	c.event.Model, c.event.Provider = cand.Name, p.Name
	uc := p.conns.get()
	if uc == nil {
		return errUpstream(502, fasthttp.ErrNoFreeConns)
	}
	c.x = exchange{p: p, dep: d, uc: uc, resp: fasthttp.AcquireResponse()}
	x := &c.x
	// A client that closes its connection while the provider works has
	// the upstream call cancelled: its connection is closed.
	if conn := c.ctx.Conn(); conn != nil {
		x.watch = watchClient(conn, clientWatchDelay, func() {
			c.gone.Store(true)
			uc.abort()
		})
	}
	c.upstreamStart = time.Time{}
	c.event.UpstreamStatus, c.event.Upstream = 0, 0
	err := c.roundTrip(x, adm)
	if err == nil {
		err = c.answer(x, adm)
	}
	if err != nil || !c.streaming() {
		// A stream closes the exchange, and its span, when its body
		// closes.
		x.close(x.watch.stop())
		c.upstreamDone()
		c.trace.endUpstream(c.event.UpstreamStatus, cand.Name, c.event.Attempts, c.upstreamUsage, c.upstreamReported, causeOf(err))
	}
	return err
}

// roundTrip sends the call to x's provider until it answers something no
// retry would change: a success, an error the client must hear, a quota
// the provider will not lift; or until the retries run out, or the call's
// deadline comes near. Retries follow the retry package's policy and its
// classification of answers (rate limits and 5xx retried, the provider's
// hint honoured up to RetryMax). An error: no answer to pass on.
func (c *call) roundTrip(x *exchange, adm *admission) error {
	g, cand := c.g, adm.model
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	var body []byte
	body, x.injected = c.upstreamBody(adm, x.dep)
	apiKey := x.p.APIKey
	if c.ownKey != "" {
		apiKey = c.ownKey
	}
	x.p.prepare(req, &c.ctx.Request.Header, c.rt.path, x.dep.upstream, body, apiKey, c.bound.Stream)
	// The provider's log can name the call as Sluice's does.
	req.Header.Set(HeaderRequestID, c.event.RequestID)
	if x.p.Kind == KindOpenAI {
		req.Header.Set("X-Client-Request-Id", c.event.RequestID)
	}
	c.trace.startUpstream(req, c.rt, x.dep, c.bound.Model, adm.clamped)
	for attempt := 1; ; attempt++ {
		if err := c.beforeAttempt(attempt, x.dep, adm); err != nil {
			return err
		}
		err := c.attempt(req, x, cand)
		if err != nil && c.gone.Load() {
			c.cut = true // the client left while the provider worked
			return errClientGone()
		}
		wait, again := g.retryPolicy.Delay(attempt, c.classify(x, err))
		if !again || g.now().Add(max(wait, g.opts.RetryMax)).After(c.deadline) {
			if err == nil {
				return nil // the provider answered: its answer is passed on
			}
			return c.failure(err)
		}
		if err == nil {
			_ = x.resp.CloseBodyStream()
		}
		g.sleep(wait, nil)
	}
}

// beforeAttempt is nil when the call may be sent now: the client is still
// there, the call has not waited past its deadline, and the provider's
// pace lets it through.
func (c *call) beforeAttempt(attempt int, d *deployment, adm *admission) error {
	if c.gone.Load() {
		return errClientGone()
	}
	if attempt == 1 && !c.g.now().Before(c.deadline) {
		// The call waited (for the key store, the limit store, a queue)
		// past its deadline: sent now it could only time out, charged. It
		// is released instead.
		return errDeadlinePassed()
	}
	if attempt > 1 {
		// The attempts before may have opened the deployment's circuit.
		if ok, retryAt := c.g.circuitAllows(d); !ok {
			return errProviderUnavailable(c.bound.Model, retryAt, c.g.now())
		}
	}
	if d.provider.Pace {
		return c.pace(d.pacer, adm.model, adm.capPer)
	}
	if p := d.provider; p.RequestsPerMinute > 0 || p.TokensPerMinute > 0 {
		input := c.bound.InputTokens
		d.pacer.count(c.g.now(), input, input+adm.capPer*max(c.bound.N, 1))
	}
	return nil
}

// attempt sends req once and reads the provider's answer into x.resp:
// whole, or up to its body when the call streams.
func (c *call) attempt(req *fasthttp.Request, x *exchange, cand *model) error {
	g, pc := c.g, x.dep.pacer
	c.event.Attempts++
	now := g.now()
	if c.upstreamStart.IsZero() {
		c.upstreamStart = now
	}
	// Only a streamed call's answer is read as it comes; any other is read
	// whole by the client, with no stream to wrap it, up to what the call
	// could produce.
	x.resp.StreamBody = c.bound.Stream
	if !c.bound.Stream {
		x.uc.client.MaxResponseBodySize = c.answerCap()
	}
	err := x.uc.client.DoTimeout(req, x.resp, c.deadline.Sub(now))
	c.event.UpstreamStatus, x.quota = 0, ""
	if err != nil {
		if !c.gone.Load() {
			g.noteUpstream(x.p, err, 0)
			g.noteCircuit(x.dep, err, 0)
		}
		return err
	}
	status := x.resp.StatusCode()
	c.event.UpstreamStatus = status
	if !c.gone.Load() {
		g.noteUpstream(x.p, nil, status)
		g.noteCircuit(x.dep, nil, status)
	}
	pc.observe(g.now(), &x.resp.Header, status)
	// Rules name the model as clients do (Identity.Model), not by its name
	// upstream.
	g.limiter.SetProviderLimits(cand.Name, cand.providerLimits())
	if status >= 400 {
		_, hinted := retryHint(&x.resp.Header, now)
		x.quota = llm.QuotaCode(status, hinted, x.resp.Body())
	}
	return nil
}

// classify is the retry package's reading of an attempt: its error, or
// the provider's answer. A quota is terminal whatever its status.
func (c *call) classify(x *exchange, err error) retry.Decision {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return retry.Decision{Class: retry.Terminal, Reason: "answer too large"}
	}
	if err != nil {
		return retry.ClassifyError(err)
	}
	status := x.resp.StatusCode()
	if status < 400 {
		return retry.Decision{Class: retry.Success}
	}
	if x.quota != "" {
		return retry.Decision{Class: retry.Terminal, Reason: x.quota}
	}
	h := &x.resp.Header
	hints := http.Header{}
	for _, name := range [...]string{"X-Should-Retry", "Retry-After-Ms", "Retry-After"} {
		if v := h.Peek(name); len(v) > 0 {
			hints.Set(name, string(v))
		}
	}
	return retry.ClassifyResponse(status, hints, nil, c.g.now())
}

// failure is what the client is told of a round trip that ended on err.
func (c *call) failure(err error) error {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return err // paced, or past its deadline: refused before the provider was called
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		// The provider answered, at a length no answer to this call could
		// have: it may have done the work, so the reservation is charged.
		c.cut = true
		return errUpstream(502, fmt.Errorf("provider answer over %d bytes, more than the call could produce: %w", c.answerCap(), err))
	case errors.Is(err, fasthttp.ErrTimeout):
		c.cut = true
		if c.session.endsCall {
			return errWallClockReached(c.session.id)
		}
		return errUpstream(504, err)
	}
	return errUpstream(502, err)
}

// answerCap bounds a provider's whole (not streamed) answer to the call:
// 1 MiB, plus 2 KiB a token of output it may produce (room for log
// probabilities), or, for embeddings, 64 KiB a token of input (a vector
// per input, each at least a token long); a provider that sends more is
// misbehaving, and is not buffered.
func (c *call) answerCap() int {
	const base = 1 << 20
	if c.bound.NoOutput {
		return base + int(min(c.bound.InputTokens, 4096))*(64<<10)
	}
	return base + int(min(c.held.capPer*max(c.bound.N, 1), 128<<10))*(2<<10)
}

// upstreamDone records the time spent on the provider, once its answer
// has been read (or has failed).
func (c *call) upstreamDone() {
	if !c.upstreamStart.IsZero() {
		c.event.Upstream = c.g.since(c.upstreamStart)
	}
}

// upstreamBody returns the body to send for adm: the output cap set when
// the client sent none, one above the model's maximum, or a clamped one;
// usage asked for in OpenAI chat streams; the model renamed for aliases and
// fallbacks.
func (c *call) upstreamBody(adm *admission, d *deployment) (body []byte, injected bool) {
	cand, capPer := adm.model, adm.capPer
	body = c.body
	b := c.bound
	setCap := !b.NoOutput && (!b.HasMaxOutput || adm.clamped || b.MaxOutputTokens > cand.MaxOutputTokens)
	if c.rt.name == "chat" {
		injected = b.Stream && !b.IncludeUsage
		maxTokensOnly := d.provider.OutputCapField == "max_tokens" && !b.NoOutput
		if setCap || injected || maxTokensOnly {
			edit := openai.ChatEdit{IncludeUsage: injected}
			if setCap || maxTokensOnly {
				edit.OutputCap = capPer
			}
			if maxTokensOnly {
				edit.CapField, edit.EnsureCapField = "max_tokens", true
			}
			body = openai.EditChat(body, b, edit)
		}
	} else if setCap && c.rt.setCap != nil {
		body = c.rt.setCap(body, b, capPer)
	}
	if d.upstream != b.Model {
		body = setModel(body, d.upstream)
	}
	return body, injected
}
