package gateway

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/valyala/fasthttp"
)

// Request headers the gateway reads.
const (
	// HeaderProviderKey carries the client's own provider key: the call is
	// made with it, its tokens are counted, its cost is not.
	HeaderProviderKey = "X-Sluice-Provider-Key"
	// HeaderTags attributes the request to comma-separated tags.
	HeaderTags = "X-Sluice-Tags"
	// HeaderPriority set to "batch" lets the request wait for rate and
	// concurrency rules instead of being refused at once.
	HeaderPriority = "X-Sluice-Priority"
)

// A client call goes down one pipeline, each stage in its own file and
// calling only the stages below it:
//
//	call.go       serve, run: authenticate (auth.go), bound the body, pick
//	              the candidates and try each in turn
//	admit.go      admit the call for a candidate (rules, context window,
//	              session)
//	roundtrip.go  send it to the provider, retrying what may clear
//	answer.go     answer the client: the provider's answer, whole or
//	              streamed (stream.go), or a refusal
//	settle.go     end: the one place every call ends, whatever its answer
//
// call is one client request on its way down.
type call struct {
	g       *Gateway
	ctx     *fasthttp.RequestCtx
	rt      *route
	body    []byte
	bound   llm.Bound
	who     Principal
	model   *model // serves the name asked for, before any fallback
	ownKey  string
	tags    []string
	maxWait time.Duration
	// waitSource says what set maxWait, for the refusal that names it.
	waitSource string
	turn       string // X-Sluice-Turn
	event      Event
	start      time.Time
	// ip is the client's address, read while the request is live.
	ip string
	// gone is set when the client closed its connection while the
	// provider worked on the call.
	gone atomic.Bool
	// session is the session the call is charged to, if any.
	session sessionCharge
	// deadline ends the call upstream: RequestTimeout after it arrived,
	// or its session's end if sooner.
	deadline time.Time
	// cut is set when the provider's answer was cut short while it worked
	// (the client left, or the deadline passed): it may have done the
	// work, so the reservation is charged.
	cut bool
	// served is set when the call came through Server, whose ConnState
	// hook runs g.after.
	served bool
	// asserted are the attributes of who that a service key set from the
	// request's headers.
	asserted attrSet
	// upstreamStart is when the first attempt of the provider that serves
	// (or last failed) was sent.
	upstreamStart time.Time
	// trace is the call's spans; nil when tracing is off.
	trace *callTrace
	// upstreamUsage is the usage the provider reported, when
	// upstreamReported, for the upstream span.
	upstreamUsage    llm.Usage
	upstreamReported bool
	// authenticated is set once who is known; tried is the last model
	// the call was admitted for, or tried to be.
	authenticated bool
	tried         *model
	// lastTry is set while the call is sent to the last deployment of its
	// last candidate: nothing is left to try after it.
	lastTry bool

	// held is the admission in hand (of the candidate being tried), and
	// x the exchange with its provider: kept here, not allocated apart.
	held admission
	x    exchange
	// How the call ends (see end): the admission it ends with, what
	// becomes of its reservation, and the usage the provider reported.
	adm      *admission
	ending   ending
	record   UsageRecord // made by settle
	usage    llm.Usage
	reported bool
	// cache is the call's use of the response cache (cache.go).
	cache callCache
	// custom are the custom metrics the call used, settled with usage (a
	// live connection's seconds: realtime_seconds.go); nil for the others.
	custom map[string]int64
	// connection is, for a live connection and its responses, the
	// connection's request id (UsageRecord.ConnectionID).
	connection string
}

// serve runs one call down the pipeline and ends it: at once, or, when its
// reservation is to be settled, once its answer is written out.
func (g *Gateway) serve(ctx *fasthttp.RequestCtx, rt *route, served bool) {
	now := g.now()
	c := &call{g: g, ctx: ctx, rt: rt, start: now, deadline: now.Add(g.opts.RequestTimeout), served: served}
	c.event.Route, c.event.RequestID = rt.name, requestIDOf(ctx)
	c.trace = g.startTrace(ctx, rt, c.event.RequestID)
	g.inFlight.add() // until end
	if err := c.run(); err != nil {
		c.refuse(err)
	}
	c.event.Status = ctx.Response.StatusCode()
	if c.streaming() {
		return // the stream ends the call when its body closes
	}
	c.afterAnswer()
}

func (c *call) streaming() bool { return c.ctx.Response.IsBodyStream() }

// run authenticates the request, bounds it and tries its candidates. An
// error returned has not been answered yet.
func (c *call) run() error {
	g, ctx := c.g, c.ctx
	c.ip = clientIP(ctx, g.opts.TrustedProxies)
	endAuth := c.trace.span(spanAuthenticate)
	who, asserted, err := g.authenticate(ctx, c.ip, &c.event)
	endAuth(causeOf(err))
	if err != nil {
		return err
	}
	c.who, c.asserted, c.authenticated = who, asserted, true
	c.event.Org, c.event.Workspace, c.event.KeyID = who.Org, who.Workspace, who.KeyID
	c.body = ctx.PostBody()
	if len(c.body) > g.opts.MaxBodyBytes {
		return errBodyTooLarge(g.opts.MaxBodyBytes)
	}
	if c.bound, err = c.rt.parse(c.body); err != nil {
		return err
	}
	c.event.Model = c.bound.Model // the name asked for, until a model serves
	// A tenant model that serves no model to this identity does not
	// exist for it: 404, as an unknown name.
	m, tenant := g.lookup(c.bound.Model, &who)
	if m == nil {
		return errUnknownModel(c.bound.Model)
	}
	c.model = m
	if err := c.readAttributes(m); err != nil {
		return err
	}
	return c.serveCached(tenant) // the response cache (cache.go), then tryCandidates
}

// readAttributes reads what the request's headers add to the call: its
// session, own provider key, tags, wait and turn.
func (c *call) readAttributes(m *model) error {
	h := &c.ctx.Request.Header
	if sid := h.Peek(HeaderSession); len(sid) > 0 {
		if err := c.joinSession(string(sid), m); err != nil {
			return err
		}
	}
	c.ownKey = string(h.Peek(HeaderProviderKey))
	if err := checkTags(h.Peek(HeaderTags)); err != nil {
		return err // 400 invalid_tags: bad bytes never reach a store or the ledger
	}
	c.tags = parseTags(h.Peek(HeaderTags))
	c.event.SessionID, c.event.Tags = c.session.id, c.tags
	var err error
	if c.maxWait, c.waitSource, err = c.g.maxWait(h, &c.who); err != nil {
		return err
	}
	if c.turn, err = turnOf(h); err != nil || c.who.Turns || c.turn == "" {
		return err
	}
	// A key not allowed turns has its turn id ignored, and said so.
	c.turn = ""
	c.event.IgnoredIdentity = append(c.event.IgnoredIdentity, HeaderTurn)
	return nil
}

// tryCandidates admits and forwards the call for the model asked for, then
// its fallbacks in turn while one's own rules refuse or its provider fails
// before doing any work. nil: the client was answered.
func (c *call) tryCandidates(tenant bool) error {
	candidates := append([]*model{c.model}, c.model.fallbacks...)
	var last error
	var soonest time.Time // the soonest probe of a candidate skipped for its circuit
	for i, cand := range candidates {
		if err := c.permitted(cand, i == 0, tenant); err != nil {
			if i == 0 {
				return err
			}
			continue
		}
		if ok, retryAt := cand.circuitReady(c.rt, c.g.now()); !ok {
			// Skipped as a model whose rule refuses is.
			if soonest.IsZero() || retryAt.Before(soonest) {
				soonest = retryAt
			}
			last = errProviderUnavailable(c.bound.Model, soonest, c.g.now())
			continue
		}
		c.tried = cand
		adm, err := c.admit(cand)
		if err != nil {
			c.event.Classes = nil // an earlier candidate's admission was released
			if i+1 < len(candidates) && (c.g.modelScoped(err, cand) || overWindow(err)) {
				// The next candidate may have the room, or the window.
				last = sooner(last, err)
				continue
			}
			return sooner(last, err)
		}
		c.event.Classes = adm.res.Result().Classes
		err = c.deploy(adm, i == len(candidates)-1)
		if err == nil {
			return nil
		}
		if c.cut {
			// What the call produced is unknown: the reservation is
			// charged.
			c.adm, c.ending = adm, endCharge
			c.event.Model = cand.Name
			return err
		}
		c.release(adm)
		if c.gone.Load() {
			return errClientGone() // before the provider had the call: nothing charged
		}
		last = err
	}
	if last == nil {
		last = errModelNotAllowed(c.bound.Model)
	}
	return last
}

// deploy sends the admitted call to its model's deployments in turn (see
// call.order) while one fails before doing any work. nil: the client was
// answered. An error: it was not, and c.cut and c.gone say why.
func (c *call) deploy(adm *admission, lastModel bool) error {
	deps := c.order(adm.model)
	if len(deps) == 0 {
		return errWrongAPI(c.bound.Model, c.rt) // the client's own key, for a deployment that does not speak the route
	}
	var last error
	var soonest time.Time
	for i, d := range deps {
		if ok, retryAt := c.g.circuitAllows(d); !ok {
			if soonest.IsZero() || retryAt.Before(soonest) {
				soonest = retryAt
			}
			last = errProviderUnavailable(c.bound.Model, soonest, c.g.now())
			continue
		}
		c.lastTry = lastModel && i == len(deps)-1
		err := c.forward(adm, d)
		if err == nil || c.cut || c.gone.Load() {
			return err
		}
		last = err
	}
	return last
}

// sooner is the refusal to tell a client whose candidates all refused on a
// rate or a concurrency cap: the one whose retry comes first, rather than
// the last candidate's, so that a client that waits for it finds an
// earlier candidate free. Any other error of the last candidate is told as
// it is.
func sooner(earlier, last error) error {
	// The library's mapping of a refusal says when to retry it.
	retryIn := func(err error) (time.Duration, bool) {
		hr, ok := sluicehttp.RefusalOf(err)
		return hr.RetryAfter, ok && !hr.Terminal && hr.RetryAfter > 0
	}
	a, ok := retryIn(earlier)
	b, lastOK := retryIn(last)
	if ok && lastOK && a < b {
		return earlier
	}
	return last
}

// permitted reports why cand may not serve the call: the key's allowed
// models name what it may ask for (the tenant model's name grants the model
// it serves; fallbacks are allowed by their own names), and the provider
// must speak the route's API.
func (c *call) permitted(cand *model, first, tenant bool) error {
	allowed := mayCall(&c.who, cand)
	if first && tenant {
		allowed = mayAsk(&c.who, c.bound.Model)
	}
	if !allowed {
		return errModelNotAllowed(c.bound.Model)
	}
	if !cand.servesRoute(c.rt) {
		return errWrongAPI(c.bound.Model, c.rt)
	}
	return nil
}

func parseTags(v []byte) []string {
	if len(v) == 0 {
		return nil
	}
	var tags []string
	for _, t := range strings.Split(string(v), ",") {
		if t = strings.TrimSpace(t); t != "" && len(t) <= 64 && len(tags) < 8 {
			tags = append(tags, t)
		}
	}
	return tags
}
