package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/openai"
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

// call is one client request on its way through the gateway.
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
	// capPer is the output cap per completion sent to the provider.
	capPer int64
	event  Event
	start  time.Time
	// ip is the client's address, read while the request is live.
	ip string
	// settle, when set, settles the call after the response is sent.
	settle func()
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
	// record is the call's usage record, made by finish.
	record UsageRecord
}

func (g *Gateway) serve(ctx *fasthttp.RequestCtx, rt *route, served bool) {
	now := time.Now()
	c := &call{g: g, ctx: ctx, rt: rt, start: now, deadline: now.Add(g.opts.RequestTimeout), served: served}
	c.event.Route, c.event.RequestID = rt.name, requestIDOf(ctx)
	c.trace = g.startTrace(ctx, rt, c.event.RequestID)
	if err := c.run(); err != nil {
		err = c.withWaitHint(c.withFitHint(err))
		c.event.Outcome, c.event.Class = outcomeOf(err)
		c.event.RefusedClass = refusedClass(err)
		c.event.Cause = causeOf(err)
		c.withRoom(err)
		writeError(ctx, rt, err)
	}
	c.event.Status = ctx.Response.StatusCode()
	if c.settle != nil {
		// Settle once the answer is written out: the client does not wait
		// for the store (a durable store commits the settlement), and
		// Drain still waits for it (finish tells inFlight).
		g.inFlight.add()
		c.whenAnswered(c.settle)
		return
	}
	if !c.streaming() {
		c.observe()
	}
}

// observe ends the call's trace and tells the Observer, once the call is
// answered and settled.
func (c *call) observe() {
	if c.event.Duration == 0 { // unless the call stopped it when its answer was out
		c.event.Duration = time.Since(c.start)
	}
	c.trace.end(&c.event)
	if c.g.opts.Observer != nil {
		c.g.opts.Observer(c.event)
	}
}

func (c *call) streaming() bool { return c.ctx.Response.IsBodyStream() }

// whenAnswered runs f once the response is written out: on the
// connection's goroutine, from the ConnState hook, when the call came
// through Server; on a goroutine of its own otherwise.
func (c *call) whenAnswered(f func()) {
	if conn := c.ctx.Conn(); c.served && conn != nil {
		c.g.after.add(conn, f)
		return
	}
	go f()
}

// run authenticates, bounds, admits and forwards the request. An error
// returned has not been answered yet.
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
	if sid := ctx.Request.Header.Peek(HeaderSession); len(sid) > 0 {
		if err := c.joinSession(string(sid), m); err != nil {
			return err
		}
	}
	c.ownKey = string(ctx.Request.Header.Peek(HeaderProviderKey))
	c.tags = parseTags(ctx.Request.Header.Peek(HeaderTags))
	c.event.SessionID, c.event.Tags = c.session.id, c.tags
	if c.maxWait, c.waitSource, err = g.maxWait(&ctx.Request.Header, &who); err != nil {
		return err
	}
	if c.turn, err = turnOf(&ctx.Request.Header); err != nil {
		return err
	}
	candidates := append([]*model{m}, m.fallbacks...)
	var last error
	for i, cand := range candidates {
		// A key's allowed models name what it may ask for: the tenant
		// model's name grants the model it serves; fallbacks are allowed
		// by their own names.
		allowed := mayCall(&who, cand)
		if i == 0 && tenant {
			allowed = mayAsk(&who, c.bound.Model)
		}
		if !allowed {
			if i == 0 {
				return errModelNotAllowed(c.bound.Model)
			}
			continue
		}
		if !cand.provider.serves(c.rt) {
			if i == 0 {
				return errWrongAPI(c.bound.Model, c.rt)
			}
			continue
		}
		c.tried = cand
		endAdmit := c.trace.admitSpan(cand.Name)
		res, capPer, clamped, err := c.admit(cand)
		endAdmit(err)
		if err != nil {
			c.event.Classes = nil // an earlier candidate's admission was released
			last = err
			if i+1 < len(candidates) && g.modelScoped(err, cand) {
				continue
			}
			return err
		}
		// Counted once admitted, so that only calls the key's limits let
		// through make the gateway count a prompt (see checkContext).
		if err := c.checkContext(cand); err != nil {
			_ = res.Release(context.Background())
			return err
		}
		if c.session.id != "" {
			if err := c.chargeSession(c.request(cand, capPer)); err != nil {
				_ = res.Release(context.Background())
				return err
			}
		}
		c.event.Classes = res.Result().Classes
		answered, err := c.forward(cand, res, capPer, clamped)
		if answered {
			return nil
		}
		if c.cut {
			// What the call produced is unknown: the reservation is
			// charged.
			c.settle = func() { c.finish(cand, res, llm.Usage{}, false) }
			c.event.Model = cand.Name
			return err
		}
		_ = res.Release(context.Background())
		c.settleSession(sluice.Usage{}, true)
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

// authenticate counts the request against its client address's pre-auth
// limit, then resolves its bearer (an API key, or a JWT when Keys is a
// JWTAuthenticator) to the principal of its trusted record, with the
// attributes a service key asserts in the request's headers. Identity
// headers the key may not assert are named in ev.IgnoredIdentity.
//
// A 401 carries the rate-limit fields of the pre-auth limit, the one limit
// that applies to a caller nobody knows; none when it is off. No tenant's
// rule applies, and the deployment-wide rules' room is not told to whoever
// sends a bad key (nor read from the store for them).
func (g *Gateway) authenticate(ctx *fasthttp.RequestCtx, ip string, ev *Event) (Principal, attrSet, error) {
	var room *sluice.Result
	if g.preAuth != nil {
		r, err := g.admitAddress(ip)
		if err != nil {
			return Principal{}, 0, err
		}
		room = &r
	}
	unauthorized := func(e *apiError) error {
		e.room = room
		return e
	}
	secret := bearer(&ctx.Request.Header)
	if secret == "" {
		return Principal{}, 0, unauthorized(errBadKey())
	}
	who, err := g.lookupKey(secret)
	if err != nil {
		var te *tokenError
		if errors.As(err, &te) {
			return Principal{}, 0, unauthorized(errBadToken(te.reason))
		}
		if errors.Is(err, ErrBadKey) {
			return Principal{}, 0, unauthorized(errBadKey())
		}
		// The key is not known yet: the pre-auth limit is the one that
		// applies.
		return Principal{}, 0, unauthorized(errKeyStore(err).(*apiError))
	}
	key := who
	who, asserted, ignored, err := assertIdentity(&ctx.Request.Header, who)
	ev.IgnoredIdentity = ignored.headers()
	if err != nil {
		// The key is known: the room of its own rules, as they stand.
		g.withRoom(err, principalIdentity(&key, ""))
		return Principal{}, 0, err
	}
	if who.Class == "" {
		// A key's own class beats its tier's.
		who.Class = g.opts.TierClass[who.Tier]
	}
	return who, asserted, nil
}

// lookupKey resolves secret with Options.Keys: from memory when it is a
// CachedAuthenticator that can, else within CatalogTimeout. An answer from
// memory needs no deadline, nor the timer one costs.
func (g *Gateway) lookupKey(secret string) (Principal, error) {
	if keys, ok := g.opts.Keys.(CachedAuthenticator); ok {
		if who, ok, err := keys.AuthenticateCached(secret); ok {
			return who, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.CatalogTimeout)
	defer cancel()
	return g.opts.Keys.Authenticate(ctx, secret)
}

// admitAddress counts a request against its client address's pre-auth
// limit and returns the limit's room. The admission is settled at once,
// charged: what is limited is requests arriving, not requests in flight.
func (g *Gateway) admitAddress(ip string) (sluice.Result, error) {
	ctx := context.Background()
	res, err := g.preAuth.Admit(ctx, sluice.Request{Identity: sluice.Identity{IP: ip}})
	if err != nil {
		return sluice.Result{}, err
	}
	return res.Result(), res.Settle(ctx, sluice.Usage{})
}

// addressRoom is the room of the pre-auth limit of the request's client
// address, read without charging; nil when the limit is off.
func (g *Gateway) addressRoom(ctx *fasthttp.RequestCtx) *sluice.Result {
	if g.preAuth == nil {
		return nil
	}
	room, err := g.preAuth.Room(context.Background(), sluice.Request{Identity: sluice.Identity{IP: clientIP(ctx, g.opts.TrustedProxies)}})
	if err != nil {
		return nil
	}
	return &room
}

// bearer returns the API key from Authorization: Bearer or x-api-key.
func bearer(h *fasthttp.RequestHeader) string {
	if v := h.Peek("Authorization"); len(v) > 7 && strings.EqualFold(string(v[:7]), "bearer ") {
		return string(bytes.TrimSpace(v[7:]))
	}
	return string(bytes.TrimSpace(h.Peek("x-api-key")))
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

// outputCap is the output cap per completion for cand: the client's,
// capped at the model's maximum, or the maximum when the client set none.
func (c *call) outputCap(cand *model) int64 {
	if c.bound.NoOutput {
		return 0
	}
	if c.bound.HasMaxOutput && c.bound.MaxOutputTokens <= cand.MaxOutputTokens {
		return c.bound.MaxOutputTokens
	}
	return cand.MaxOutputTokens
}

// identity is who the call is charged to, on cand (nil: no model yet).
func (c *call) identity(cand *model) sluice.Identity {
	id := principalIdentity(&c.who, "")
	id.IP, id.Session, id.Route, id.Tags = c.ip, c.session.id, c.rt.name, c.tags
	if cand != nil {
		id.Model = cand.Name
	}
	return id
}

// principalIdentity is who calling model, without a call's own attributes
// (tags, session, route): the identity whose budgets gate a session's mint,
// and whose rules' room the gateway's answers report when no call of the
// key was admitted (the session routes, a refused identity header).
func principalIdentity(who *Principal, model string) sluice.Identity {
	return sluice.Identity{Org: who.Org, Workspace: who.Workspace, Team: who.Team, User: who.User, Key: who.KeyID, Model: model, Tier: who.Tier, Class: who.Class}
}

func (c *call) request(cand *model, capPer int64) sluice.Request {
	max := sluice.Usage{InputTokens: c.bound.InputTokens, OutputTokens: capPer * c.bound.N}
	price := cand.Price
	if c.ownKey != "" {
		price = sluice.Price{}
	}
	max.Cost = price.Cost(max)
	return sluice.Request{
		Identity:    c.identity(cand),
		Max:         max,
		OutputPrice: price.Output,
		Timeout:     c.g.opts.RequestTimeout,
		MaxWait:     c.maxWait,
		Turn:        c.turn,
	}
}

// admit admits the request for cand. When a rule with fit: clamp refuses,
// it admits with the largest output cap that fits, if that is at least the
// rule's min_output_tokens.
func (c *call) admit(cand *model) (*sluice.Reservation, int64, bool, error) {
	capPer := c.outputCap(cand)
	req := c.request(cand, capPer)
	ctx := context.Background()
	t0 := time.Now()
	var w *clientWatch
	if c.maxWait > 0 {
		// Batch work may wait: bounded, and given up when the client goes
		// (a client that gives up must not have its call admitted, charged
		// or sent upstream). A call that does not wait needs neither (the
		// stores bound their own calls), nor the timer a deadline costs on
		// every admission.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.maxWait+c.g.opts.RequestTimeout)
		defer cancel()
		if c.ctx.Conn() != nil {
			w = watchClient(c.ctx.Conn(), 0, cancel)
		}
	}
	res, err := c.g.limiter.Admit(ctx, req)
	if w != nil {
		w.stop()
		if err != nil && errors.Is(err, context.Canceled) {
			return nil, capPer, false, errClientGone()
		}
	}
	c.event.Decision += time.Since(t0)
	if err == nil || c.bound.NoOutput || capPer == 0 {
		return res, capPer, false, err
	}
	rule, ok := c.g.clampRule(err)
	if !ok {
		return nil, capPer, false, err
	}
	fit, ferr := c.g.limiter.Fit(ctx, req)
	if ferr != nil {
		return nil, capPer, false, err
	}
	perCompletion := fit / c.bound.N
	// Below the request's own floor (16 for Responses, above the thinking
	// budget for Anthropic) the provider would refuse the clamped call.
	if floor := min(capPer, max(1, rule.MinOutputTokens, c.bound.MinOutputTokens)); perCompletion < floor {
		// Even the floor does not fit now. The answer is the refusal of
		// the smallest call the rule would clamp to: a spent budget's
		// (terminal, with its reset) or a bucket's (retry later), and 413
		// only when no period could ever hold it. A clamp rule never
		// answers 413 to a call it would clamp another day.
		perCompletion = floor
	}
	req = c.request(cand, perCompletion)
	res, err2 := c.g.limiter.Admit(ctx, req)
	if err2 != nil {
		return nil, capPer, false, err2
	}
	return res, perCompletion, perCompletion < capPer, nil
}

// clampRule returns the rule behind a refusal when it lets the gateway
// clamp the output cap.
func (g *Gateway) clampRule(err error) (sluice.Rule, bool) {
	var name string
	var rl *sluice.RateLimitError
	var bu *sluice.BudgetError
	var tl *sluice.TooLargeError
	switch {
	case errors.As(err, &rl):
		name = rl.Rule
	case errors.As(err, &bu):
		name = bu.Rule
	case errors.As(err, &tl):
		name = tl.Rule
	default:
		return sluice.Rule{}, false
	}
	for _, r := range g.limiter.Policy().Rules {
		if r.Name == name && r.Fit == "clamp" {
			return r, true
		}
	}
	return sluice.Rule{}, false
}

// modelScoped reports whether the rule that refused belongs to the model
// itself (matches it, or counts per model), so another model may serve.
func (g *Gateway) modelScoped(err error, cand *model) bool {
	var name string
	var rl *sluice.RateLimitError
	var bz *sluice.BusyError
	var bu *sluice.BudgetError
	var tl *sluice.TooLargeError
	switch {
	case errors.As(err, &rl):
		name = rl.Rule
	case errors.As(err, &bz):
		name = bz.Rule
	case errors.As(err, &bu):
		name = bu.Rule
	case errors.As(err, &tl):
		name = tl.Rule
	default:
		return false
	}
	for _, r := range g.limiter.Policy().Rules {
		if r.Name == name {
			return slices.Contains(r.Match.Models, cand.Name) || slices.Contains(strings.Split(r.Subject, "+"), "model")
		}
	}
	return false
}

// upstreamBody returns the body to send for cand: the output cap set when
// the client sent none, one above the model's maximum, or a clamped one;
// usage asked for in OpenAI chat streams; the model renamed for aliases and
// fallbacks.
func (c *call) upstreamBody(cand *model, capPer int64, clamped bool) (body []byte, injected bool) {
	body = c.body
	b := c.bound
	setCap := !b.NoOutput && (!b.HasMaxOutput || clamped || b.MaxOutputTokens > cand.MaxOutputTokens)
	if c.rt.name == "chat" {
		injected = b.Stream && !b.IncludeUsage
		maxTokensOnly := cand.provider.OutputCapField == "max_tokens" && !b.NoOutput
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
	if cand.UpstreamName != b.Model {
		body = setModel(body, cand.UpstreamName)
	}
	return body, injected
}

// usageBound is the most tokens the call could produce: the model's context
// window (or, unknown, the library's ceiling on one usage value) plus the
// output cap sent times n.
func (c *call) usageBound(cand *model) int64 {
	window := cand.ContextWindow
	if window <= 0 {
		window = sluice.MaxTokens
	}
	n := max(c.bound.N, 1)
	return min(window+c.capPer*n, sluice.MaxTokens)
}

// impossible reports usage the call could not have produced: a negative
// count, parts larger than the whole, or more tokens than its bound.
func (c *call) impossible(cand *model, u llm.Usage) bool {
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0 ||
		u.CachedInputTokens > u.InputTokens-u.CacheWriteTokens {
		return true
	}
	bound := c.usageBound(cand)
	return u.InputTokens > bound || u.OutputTokens > bound || u.InputTokens+u.OutputTokens > bound
}

// settleUsage turns reported usage into what the limiter charges.
func (c *call) settleUsage(cand *model, u llm.Usage) sluice.Usage {
	su := sluice.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteTokens}
	if c.ownKey == "" {
		su.Cost = cand.Price.Cost(su)
	}
	return su
}

// finish settles the reservation with usage (or the estimate when nothing
// was reported). Once the settlement is durable it records the call in the
// ledger, tells the Observer, and marks the call done for Drain (the
// caller added it to g.inFlight). With a journaling store that happens
// later, on the store's goroutine: nothing there may touch c.ctx, which
// serves the connection's next request by then.
func (c *call) finish(cand *model, res *sluice.Reservation, u llm.Usage, reported bool) {
	// The answer is out (a stream has ended): the request's duration stops
	// here, before the settlement's commit.
	c.event.Duration = time.Since(c.start)
	su := c.reportedUsage(cand, u, reported) // zero: the reservation is charged
	charged := su
	estimated := charged.IsZero()
	reserved := c.request(cand, c.capPer).Max
	if estimated {
		// What the reservation charged: the output cap sent, clamped or not.
		charged = reserved
	}
	// The session's counters are in the catalog, not the limit store:
	// settled here, on the connection's goroutine after the answer.
	c.settleSession(charged, false)
	c.trace.startSettle()
	c.record = UsageRecord{At: time.Now(), Org: c.who.Org, Workspace: c.who.Workspace, Route: c.rt.name, Model: cand.Name,
		InputTokens: charged.InputTokens, OutputTokens: charged.OutputTokens, CachedInputTokens: charged.CachedInputTokens, Cost: charged.Cost, Tags: c.tags,
		KeyID: c.who.KeyID, User: c.who.User, Team: c.who.Team, RequestID: c.event.RequestID, Estimated: estimated, Reserved: reserved}
	c.event.Usage = charged
	ctx, taken := c.g.attach(c.record)
	res.SettleAsync(ctx, su, func(err error) { c.settled(ctx, cand, res, su, taken, err) })
}

// reportedUsage is what the call is settled with: the usage the provider
// reported, priced, or zero (the reservation is charged) when it reported
// none, or none it could have produced.
func (c *call) reportedUsage(cand *model, u llm.Usage, reported bool) sluice.Usage {
	if !reported {
		return sluice.Usage{}
	}
	if c.impossible(cand, u) {
		// A provider that reports more than the call could produce is
		// misbehaving (or hostile): the value is never stored, and the
		// reservation is charged as for a call that reported nothing.
		c.g.log.Error("provider reported impossible usage; the reservation is charged instead", "request_id", c.event.RequestID, "route", c.rt.name, "model", cand.Name,
			"input_tokens", u.InputTokens, "output_tokens", u.OutputTokens, "cached_input_tokens", u.CachedInputTokens,
			"cache_write_tokens", u.CacheWriteTokens, "bound", c.usageBound(cand))
		c.event.ImpossibleUsage = true
		return sluice.Usage{}
	}
	return c.settleUsage(cand, u)
}

// settled ends finish once the store answered the settlement of res with
// su, made with ctx (which carried c.record when taken is not nil): it
// records the call, or leaves it to retries, and tells the Observer.
func (c *call) settled(ctx context.Context, cand *model, res *sluice.Reservation, su sluice.Usage, taken func() bool, err error) {
	c.trace.endSettle(err)
	if err != nil {
		c.g.log.Error("settle failed; retrying until the reservation's deadline", "request_id", c.event.RequestID, "route", c.rt.name, "model", cand.Name, "err", err)
		go c.g.retrySettle(ctx, res, su, c.record, taken)
	}
	if err == nil || taken == nil {
		// With the record attached, a failed settlement leaves it to
		// the retries.
		c.g.record(c.record, taken)
	}
	c.observe()
	c.g.inFlight.done()
}

// attach returns the context to settle a call with: carrying u to the
// store when the UsageRecorder is a SettlementRecorder. taken is nil when
// u is not attached.
func (g *Gateway) attach(u UsageRecord) (_ context.Context, taken func() bool) {
	if sr, ok := g.opts.Usage.(SettlementRecorder); ok {
		return sr.Attach(context.Background(), u)
	}
	return context.Background(), nil
}

// record gives u to the UsageRecorder once its settlement succeeded,
// unless the store took it with the settlement.
func (g *Gateway) record(u UsageRecord, taken func() bool) {
	if g.opts.Usage != nil && (taken == nil || !taken()) {
		g.opts.Usage.RecordUsage(u)
	}
}

// setResultHeaders writes the admission's headers on a response.
func (c *call) setResultHeaders(h *fasthttp.ResponseHeader, cand *model, res *sluice.Reservation, capPer int64, clamped bool) {
	r := res.Result()
	c.event.Shadowed, c.event.FailedOpen, c.event.BudgetWarnings = r.Shadowed, r.FailedOpenRules, r.Warnings
	r.SetHeaders(canonicalHeaders{h}, time.Now())
	canonicalHeaders{h}.Set(headerModel, cand.Name)
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
	if clamped {
		h.Set("X-Sluice-Output-Cap", strconv.FormatInt(capPer, 10))
	}
}

// retrySettle settles res with u again, backing off (100 ms, doubling to
// 5 s), until the store answers or the reservation's deadline passes
// (then the sweep charges it). Settling is idempotent: a settlement the
// store applied before failing to answer, or one the sweep made, is not
// applied twice, nor is its record, which base carries when taken is not
// nil (written with the settlement that applies, recorded here when the
// store did not take it). Leases are freed as soon as the store is back.
func (g *Gateway) retrySettle(base context.Context, res *sluice.Reservation, u sluice.Usage, rec UsageRecord, taken func() bool) {
	delay := g.opts.SettleRetryBase
	for attempt := 1; ; attempt++ {
		if time.Now().Add(delay).After(res.Deadline()) {
			g.log.Error("settle abandoned at the reservation's deadline; the sweep charges it", "request_id", rec.RequestID, "model", rec.Model, "attempts", attempt)
			return
		}
		time.Sleep(delay)
		delay = min(2*delay, 5*time.Second)
		ctx, cancel := context.WithTimeout(base, 5*time.Second)
		err := res.Settle(ctx, u)
		cancel()
		if err == nil {
			g.log.Info("settled after retrying", "request_id", rec.RequestID, "model", rec.Model, "attempts", attempt+1)
			if taken != nil {
				g.record(rec, taken)
			}
			return
		}
	}
}
