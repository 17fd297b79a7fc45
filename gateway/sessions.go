package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/dollars"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/valyala/fasthttp"
)

// HeaderSession carries the session a call is charged to.
const HeaderSession = "X-Sluice-Session"

// maxSessionID bounds a session ID read from a client: longer is no
// session's, and is not looked up.
const maxSessionID = 64

// Sessions configures POST /v1/sessions (see Options.Sessions).
type Sessions struct {
	Store SessionStore
	// Terms gives the model and ceilings of a session minted for a key:
	// the model is chosen by the gateway, never by the client.
	Terms func(Principal) SessionTerms
	// MaxOpenPerUser caps a user's open sessions (0: no cap).
	MaxOpenPerUser int
}

// SessionTerms are what a new session gets. A zero ceiling is none;
// MaxDuration is required.
type SessionTerms struct {
	Model       string
	MaxDuration time.Duration
	MaxTurns    int64
	MaxTokens   int64
	MaxCost     int64 // micro-dollars
	// MaxContext bounds the input tokens of any one call: a conversation
	// that resends an ever longer transcript stops there.
	MaxContext int64
}

// sessionJSON is a session as the client API shows it.
type sessionJSON struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Model     string `json:"model"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at"`
	Status    string `json:"status"` // open, closed, expired
	Ceilings  struct {
		WallClockSeconds int64 `json:"wall_clock_seconds"`
		Turns            int64 `json:"turns"`
		Tokens           int64 `json:"tokens"`
		CostMicros       int64 `json:"cost_micros"`
		// Cost is CostMicros in dollars ("$2.5"); absent without a cost
		// ceiling.
		Cost          string `json:"cost,omitempty"`
		ContextTokens int64  `json:"context_tokens"`
	} `json:"ceilings"`
	Used struct {
		Turns      int64 `json:"turns"`
		Tokens     int64 `json:"tokens"`
		CostMicros int64 `json:"cost_micros"`
		// Cost is CostMicros in dollars.
		Cost string `json:"cost"`
	} `json:"used"`
	CeilingReached string `json:"ceiling_reached,omitempty"`
	// LoweredBy names the budgets that could not fund the configured
	// ceilings at the mint, and lowered them to what they have left.
	LoweredBy []string `json:"lowered_by,omitempty"`
}

// lowered names the budgets that lowered the ceilings of a session just
// minted.
func (g *Gateway) writeSession(ctx *fasthttp.RequestCtx, status int, s Session, lowered []string) {
	var j sessionJSON
	j.ID, j.Object, j.Model = s.ID, "session", s.Model
	j.CreatedAt, j.ExpiresAt = s.CreatedAt.Unix(), s.ExpiresAt.Unix()
	switch {
	case !s.ClosedAt.IsZero():
		j.Status = "closed"
	case !g.now().Before(s.ExpiresAt):
		j.Status = "expired"
	default:
		j.Status = "open"
	}
	j.Ceilings.WallClockSeconds = int64(s.ExpiresAt.Sub(s.CreatedAt).Round(time.Second) / time.Second)
	j.Ceilings.Turns, j.Ceilings.Tokens, j.Ceilings.CostMicros = s.MaxTurns, s.MaxTokens, s.MaxCost
	j.Ceilings.ContextTokens = s.MaxContext
	j.Used.Turns, j.Used.Tokens, j.Used.CostMicros = s.Turns, s.Tokens, s.Cost
	j.Used.Cost = dollars.Text(s.Cost)
	if s.MaxCost > 0 {
		j.Ceilings.Cost = dollars.Text(s.MaxCost)
	}
	j.CeilingReached = s.Ceiling
	j.LoweredBy = lowered
	body, _ := json.Marshal(j)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// sessionRequest is the optional body of POST /v1/sessions: ceilings lower
// than the gateway's terms. A higher one is refused.
type sessionRequest struct {
	MaxDurationSeconds *int64 `json:"max_duration_seconds"`
	MaxTurns           *int64 `json:"max_turns"`
	MaxTokens          *int64 `json:"max_tokens"`
	MaxCostMicros      *int64 `json:"max_cost_micros"`
	MaxContextTokens   *int64 `json:"max_context_tokens"`
}

// lower applies a requested ceiling to the configured one (0: none).
func lower(name string, configured int64, asked *int64) (int64, error) {
	switch {
	case asked == nil:
		return configured, nil
	case *asked <= 0:
		return 0, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_value", param: name,
			message: fmt.Sprintf("%s must be positive, got %d.", name, *asked)}
	case configured > 0 && *asked > configured:
		return 0, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_value", param: name,
			message: fmt.Sprintf("%s %d is above this gateway's ceiling of %d.", name, *asked, configured)}
	}
	return *asked, nil
}

// answerSession writes s with the rate-limit fields of who's rules for the
// session's model, as every answer carries them; none when the store does
// not answer (the session is answered anyway).
func (g *Gateway) answerSession(ctx *fasthttp.RequestCtx, who *Principal, status int, s Session, lowered []string) {
	if room, err := g.limiter.Room(context.Background(), sluice.Request{Identity: principalIdentity(who, s.Model)}); err == nil {
		sluicehttp.SetHeaders(canonicalHeaders{&ctx.Response.Header}, room, g.now())
	}
	g.writeSession(ctx, status, s, lowered)
}

// sessions serves /v1/sessions and /v1/sessions/{id}.
func (g *Gateway) sessions(ctx *fasthttp.RequestCtx, path, method string) {
	rt := routes["/v1/chat/completions"] // the error shape
	if g.opts.Sessions == nil {
		// Refused before its key is read: the one limit that applies is
		// the client address's pre-auth limit, read without charging.
		e := errNotFound(path).(*apiError)
		e.room = g.addressRoom(ctx)
		g.refuseEarly(ctx, path, e)
		return
	}
	var authEvent Event
	who, _, err := g.authenticate(ctx, clientIP(ctx, g.opts.TrustedProxies), &authEvent)
	if err != nil {
		g.refuseEarly(ctx, path, err)
		return
	}
	// refuse answers a refusal made once the key is known with the
	// rate-limit fields of the key's rules for model ("" when no model is
	// known), as the model routes' own refusals carry them, and tells the
	// Observer.
	refuse := func(err error, model string) {
		g.withRoom(err, principalIdentity(&who, model))
		g.writeError(ctx, rt, err)
		ev := Event{Route: "sessions", Model: model, Org: who.Org, Workspace: who.Workspace, KeyID: who.KeyID,
			IgnoredIdentity: authEvent.IgnoredIdentity, Cause: causeOf(err)}
		ev.Outcome, ev.Class = outcomeOf(err)
		g.observe(ctx, ev)
	}
	st := g.opts.Sessions.Store
	bg, cancel := g.catalogContext()
	defer cancel()
	id := strings.TrimPrefix(strings.TrimPrefix(path, "/v1/sessions"), "/")
	switch {
	case id == "" && method == fasthttp.MethodPost:
		terms := g.opts.Sessions.Terms(who)
		s, created, lowered, err := g.mintSession(ctx, who, terms, ctx.PostBody())
		if err != nil {
			refuse(err, terms.Model)
			return
		}
		ev := Event{Route: "sessions", Model: s.Model, Outcome: outcomeAdmitted, Org: who.Org, Workspace: who.Workspace, KeyID: who.KeyID,
			IgnoredIdentity: authEvent.IgnoredIdentity}
		status := 200
		if created {
			status = 201
			ev.Session = "opened"
		}
		g.answerSession(ctx, &who, status, s, lowered)
		g.observe(ctx, ev)
	case id != "" && !validAttribute(id, maxSessionID):
		refuse(sessionError(ErrUnknownSession), "")
	case id != "" && !strings.Contains(id, "/") && (method == fasthttp.MethodGet || method == fasthttp.MethodDelete):
		var s Session
		var closed bool
		if method == fasthttp.MethodGet {
			s, err = st.GetSession(bg, id, who.KeyID)
		} else {
			s, closed, err = st.CloseSession(bg, id, who.KeyID)
		}
		if err != nil {
			refuse(sessionError(err), "")
			return
		}
		g.answerSession(ctx, &who, 200, s, nil)
		ev := Event{Route: "sessions", Model: s.Model, Outcome: outcomeAdmitted, Org: who.Org, Workspace: who.Workspace, KeyID: who.KeyID,
			IgnoredIdentity: authEvent.IgnoredIdentity}
		if closed {
			ev.Session, ev.SessionEnded = "closed", s.Ceiling == ""
			ev.SessionUsed = SessionUsage{Turns: s.Turns, Tokens: s.Tokens, Cost: s.Cost}
		}
		g.observe(ctx, ev)
	default:
		if id == "" {
			ctx.Response.Header.Set("Allow", fasthttp.MethodPost)
		} else {
			ctx.Response.Header.Set("Allow", "GET, DELETE")
		}
		refuse(errMethodNotAllowed(method, path), "")
	}
}

// mintSession is POST /v1/sessions: the gate of long interactive work. It
// refuses when a budget that applies to the key is already spent, and
// opens the session on the model and ceilings of terms (the key's tier's)
// or the lower ones the body asks for.
func (g *Gateway) mintSession(ctx *fasthttp.RequestCtx, who Principal, terms SessionTerms, body []byte) (s Session, created bool, lowered []string, err error) {
	so := g.opts.Sessions
	if _, ok := g.models[terms.Model]; !ok || terms.MaxDuration <= 0 {
		g.log.Error("session terms name no model this gateway serves, or no duration", "model", terms.Model, "max_duration", terms.MaxDuration)
		return Session{}, false, nil, &apiError{status: 500, typ: "server_error", anthType: "api_error", code: "session_terms",
			message: "Sessions are misconfigured on this gateway."}
	}
	var req sessionRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return Session{}, false, nil, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error",
				code: "invalid_json", message: "The session request is not valid JSON: " + err.Error()}
		}
	}
	secs, err := lower("max_duration_seconds", int64(terms.MaxDuration/time.Second), req.MaxDurationSeconds)
	if err != nil {
		return Session{}, false, nil, err
	}
	s = Session{KeyID: who.KeyID, Org: who.Org, Workspace: who.Workspace, User: who.User, Model: terms.Model,
		IdempotencyKey: string(ctx.Request.Header.Peek("Idempotency-Key")), ExpiresAt: g.now().Add(time.Duration(secs) * time.Second)}
	if s.MaxTurns, err = lower("max_turns", terms.MaxTurns, req.MaxTurns); err != nil {
		return Session{}, false, nil, err
	}
	if s.MaxTokens, err = lower("max_tokens", terms.MaxTokens, req.MaxTokens); err != nil {
		return Session{}, false, nil, err
	}
	if s.MaxCost, err = lower("max_cost_micros", terms.MaxCost, req.MaxCostMicros); err != nil {
		return Session{}, false, nil, err
	}
	if s.MaxContext, err = lower("max_context_tokens", terms.MaxContext, req.MaxContextTokens); err != nil {
		return Session{}, false, nil, err
	}
	if !mayCall(&who, g.models[terms.Model]) {
		return Session{}, false, nil, errModelNotAllowed(terms.Model)
	}
	if len(s.IdempotencyKey) > 255 {
		return Session{}, false, nil, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error",
			code: "invalid_value", param: "Idempotency-Key", message: "Idempotency-Key is longer than 255 bytes."}
	}
	left, err := g.budgetsLeft(who, terms.Model)
	if err != nil {
		return Session{}, false, nil, err
	}
	// Shorten rather than refuse: a session the budgets cannot fund in
	// full gets the ceilings they can, and the client is told so up front.
	if left.tokens >= 0 && (s.MaxTokens == 0 || left.tokens < s.MaxTokens) {
		s.MaxTokens = left.tokens
		lowered = append(lowered, left.tokensRule)
	}
	if left.cost >= 0 && (s.MaxCost == 0 || left.cost < s.MaxCost) {
		s.MaxCost = left.cost
		lowered = append(lowered, left.costRule)
	}
	cctx, cancel := g.catalogContext()
	defer cancel()
	s, created, err = so.Store.OpenSession(cctx, s, so.MaxOpenPerUser)
	if err != nil {
		return Session{}, false, nil, sessionError(err)
	}
	if !created {
		lowered = nil // the session minted earlier, as it was then
	}
	return s, created, lowered, nil
}

// fundable is what the budgets that apply to a session's calls have left:
// the least remaining tokens and cost (-1 when no budget counts them), and
// the rule that has it.
type fundable struct {
	tokens, cost         int64
	tokensRule, costRule string
}

// budgetsLeft refuses, as the budget itself would, when a budget that
// applies to who calling model is spent: a session must not open on a
// budget that cannot serve its first turn. Otherwise it says what the
// token and cost budgets have left.
func (g *Gateway) budgetsLeft(who Principal, model string) (fundable, error) {
	left := fundable{tokens: -1, cost: -1}
	id := principalIdentity(&who, model)
	eff, err := g.limiter.Effective(context.Background(), id)
	if err != nil {
		return left, err
	}
	rules := g.limiter.Policy().Rules
	for _, e := range eff {
		if e.Kind != sluice.KindBudget || e.Mode == sluice.ModeShadow || e.Limit <= 0 {
			continue
		}
		if e.Remaining > 0 {
			switch {
			case e.Metric == sluice.MetricTokens && (left.tokens < 0 || e.Remaining < left.tokens):
				left.tokens, left.tokensRule = e.Remaining, e.Rule
			case e.Metric == sluice.MetricCost && (left.cost < 0 || e.Remaining < left.cost):
				left.cost, left.costRule = e.Remaining, e.Rule
			}
			continue
		}
		var period sluice.Period
		if i := slices.IndexFunc(rules, func(r sluice.Rule) bool { return r.Name == e.Rule }); i >= 0 {
			period = rules[i].Period
		}
		refusal := sluice.Refusal{Rule: e.Rule, Subject: e.Subject, Kind: e.Kind, Metric: e.Metric,
			Limit: e.Limit, Used: e.Used, Period: period, ResetAt: e.ResetAt}
		// The rooms of the other rules, for the answer's rate-limit
		// fields, as Admit's refusals carry them; left out if the store
		// does not answer.
		if room, err := g.limiter.Room(context.Background(), sluice.Request{Identity: id}); err == nil {
			refusal.Result = &room
		}
		return left, &sluice.BudgetError{Refusal: refusal}
	}
	return left, nil
}

// sessionError turns a session store error into the client's answer.
func sessionError(err error) error {
	var ce *SessionCeilingError
	switch {
	case errors.As(err, &ce):
		return &apiError{status: 429, typ: "budget_exceeded", anthType: "rate_limit_error", code: "session_ceiling_reached", terminal: true,
			message: fmt.Sprintf("Session %s reached its %s ceiling (%s used); open a new session.", ce.Session.ID, ceilingWords(ce.Ceiling), ceilingPart(ce.Ceiling, ce.Used, ce.Limit)),
			limit: &sluicehttp.RefusalLimit{Rule: "session_" + ce.Ceiling, Subject: "session", Metric: ceilingMetric(ce.Ceiling),
				Limit: ce.Limit, Used: ce.Used, Remaining: max(0, ce.Limit-ce.Used)}}
	case errors.Is(err, ErrUnknownSession):
		return &apiError{status: 404, typ: "invalid_request_error", anthType: "not_found_error", code: "session_not_found",
			message: "No such session for this key."}
	case errors.Is(err, ErrSessionClosed):
		return &apiError{status: 409, typ: "invalid_request_error", anthType: "invalid_request_error", code: "session_closed", terminal: true,
			message: "The session is closed; open a new session."}
	case errors.Is(err, ErrTooManySessions):
		return &apiError{status: 429, typ: "insufficient_quota", anthType: "rate_limit_error", code: "too_many_sessions", terminal: true,
			message: "This user already has the most open sessions allowed; close one (DELETE /v1/sessions/{id}) or let one expire."}
	case errors.Is(err, ErrInvalidSession):
		return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_value", message: err.Error()}
	}
	return &apiError{status: 503, typ: "server_error", anthType: "api_error", code: "session_store_unavailable",
		message: "The session store is unavailable; retry shortly.", retryHint: time.Second}
}

func ceilingWords(c string) string {
	switch c {
	case "wall_clock":
		return "wall-clock"
	case "context":
		return "context (input tokens of one call)"
	}
	return c
}

// ceilingPart writes what a session used of ceiling c: "$1.01 of $1.00",
// "90 of 60 seconds", "5 of 5 requests".
func ceilingPart(c string, used, limit int64) string {
	if c == "cost" {
		return dollars.Money(used) + " of " + dollars.Money(limit)
	}
	return fmt.Sprintf("%d of %d %s", used, limit, ceilingMetric(c))
}

// sessionCharge is what a call reserved on its session.
type sessionCharge struct {
	id             string
	tokens, cost   int64
	charged, ended bool
	// endsCall is set when the session's wall clock is the call's
	// deadline: a call cut then reached the session's ceiling.
	endsCall bool
}

// chargeSession reserves a call's worst case on its session, after the
// limiter admitted it (which the caller releases on a refusal).
func (c *call) chargeSession(req sluice.Request) error {
	sc := &c.session
	sc.tokens, sc.cost = req.Max.InputTokens+req.Max.OutputTokens, req.Max.Cost
	cctx, cancel := c.g.catalogContext()
	defer cancel()
	if _, err := c.g.opts.Sessions.Store.ChargeSession(cctx, sc.id, c.who.KeyID, sc.tokens, sc.cost, req.Max.InputTokens); err != nil {
		var ce *SessionCeilingError
		if errors.As(err, &ce) && ce.First {
			c.event.Session, c.event.Ceiling, c.event.SessionEnded = "ceiling", ce.Ceiling, true
			c.event.SessionUsed = SessionUsage{Turns: ce.Session.Turns, Tokens: ce.Session.Tokens, Cost: ce.Session.Cost}
		}
		return sessionError(err)
	}
	sc.charged, sc.ended = true, false
	return nil
}

// settleSession replaces the session's reservation with what the call used
// (u), or, when the model did no work (refund), gives back the turn too.
func (c *call) settleSession(u sluice.Usage, refund bool) {
	sc := &c.session
	if !sc.charged || sc.ended {
		return
	}
	sc.ended = true
	turns, tokens, cost := int64(0), u.InputTokens+u.OutputTokens-sc.tokens, u.Cost-sc.cost
	if refund {
		turns, tokens, cost = -1, -sc.tokens, -sc.cost
	}
	cctx, cancel := c.g.catalogContext()
	defer cancel()
	if err := c.g.opts.Sessions.Store.SettleSession(cctx, sc.id, turns, tokens, cost); err != nil {
		c.g.log.Error("session settle failed", "session", sc.id, "err", err)
	}
}

// joinSession charges the call to session id of the caller's key: the
// session must be open and serve the model asked for (m).
func (c *call) joinSession(id string, m *model) error {
	if c.g.opts.Sessions == nil {
		return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "sessions_disabled",
			message: "This gateway has no sessions; remove the " + HeaderSession + " header."}
	}
	if !validAttribute(id, maxSessionID) {
		return sessionError(ErrUnknownSession)
	}
	cctx, cancel := c.g.catalogContext()
	defer cancel()
	s, err := c.g.opts.Sessions.Store.GetSession(cctx, id, c.who.KeyID)
	if err != nil {
		return sessionError(err)
	}
	if m.Name != s.Model {
		return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "session_model", param: "model",
			message: fmt.Sprintf("Session %s serves model %q, not %q.", s.ID, s.Model, c.bound.Model)}
	}
	// The session keeps the workspace and user it was minted for: a call
	// on it is theirs, and a service key may not assert others.
	switch {
	case c.asserted.has(assertedWorkspace) && c.who.Workspace != s.Workspace:
		return errSessionIdentity(s.ID, HeaderWorkspace, "workspace", s.Workspace)
	case c.asserted.has(assertedUser) && c.who.User != s.User:
		return errSessionIdentity(s.ID, HeaderUser, "user", s.User)
	}
	c.who.Workspace, c.who.User = s.Workspace, s.User
	c.event.Workspace = s.Workspace
	c.session.id = s.ID
	// The session's wall clock bounds its calls: a call still running
	// when it ends is cut, as the request deadline would cut it.
	if s.ExpiresAt.Before(c.deadline) {
		c.deadline = s.ExpiresAt
		c.session.endsCall = true
	}
	return nil
}

// errWallClockReached is the answer to a call its session's wall clock
// cut: the session's ceiling, not the provider failing.
func errWallClockReached(id string) error {
	return &apiError{status: 429, typ: "budget_exceeded", anthType: "rate_limit_error", code: "session_ceiling_reached", terminal: true,
		message: fmt.Sprintf("Session %s reached its wall-clock ceiling while the call ran; the call was cut. Open a new session.", id),
		limit:   &sluicehttp.RefusalLimit{Rule: "session_wall_clock", Subject: "session", Metric: "seconds"}}
}

func errSessionIdentity(id, header, attribute, value string) error {
	return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "session_identity", param: header,
		message: fmt.Sprintf("Session %s belongs to %s %q; send that %s or none.", id, attribute, value, header)}
}

// observe tells the Observer about a session event.
func (g *Gateway) observe(ctx *fasthttp.RequestCtx, ev Event) {
	if g.opts.Observer != nil {
		ev.Status = ctx.Response.StatusCode()
		ev.RequestID = requestIDOf(ctx)
		g.opts.Observer(ev)
	}
}

// ceilingMetric is the metric a session ceiling counts, in the words of
// rules.
func ceilingMetric(c string) string {
	switch c {
	case "wall_clock":
		return "seconds"
	case "turns":
		return "requests"
	case "cost":
		return "cost"
	case "context":
		return "input_tokens"
	}
	return "tokens"
}

// catalogContext bounds one call to the key or session store.
func (g *Gateway) catalogContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.opts.CatalogTimeout)
}
