package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// A live connection (GET /v1/realtime?model=..., the OpenAI Realtime API
// over WebSocket) goes down the pipeline of a call, once for the
// connection and once for each response made on it:
//
//	realtime.go           connect: authenticate, resolve the model, join
//	                      the session, admit the connection (its lease), dial
//	                      the provider, upgrade
//	realtime_conn.go      relay the events both ways until either side ends
//	realtime_response.go  admit each response.create before it is
//	                      forwarded, and end it with its response.done
//	realtime_close.go     the error events and close codes a limit speaks with
//
// The connection is a call in flight for as long as it is open: its lease
// holds a place on concurrency rules (and counts one request), and is
// settled at close by end, as every call is. Each response is a call of
// its own (Request.InFlight: it takes no second place), settled with the
// usage of its response.done.

// realtimeRoute is the route of a live connection and of its responses,
// in rules, the ledger and the error shape (OpenAI's).
var realtimeRoute = &route{path: "/v1/realtime", name: "realtime"}

// realtimeUpgrader upgrades a client connection. Any origin may connect:
// a connection is authenticated by its key, never by a cookie, so a page
// of another origin can do nothing its key could not.
var realtimeUpgrader = websocket.FastHTTPUpgrader{
	CheckOrigin:  func(*fasthttp.RequestCtx) bool { return true },
	Subprotocols: []string{"realtime"},
}

// realtime serves GET /v1/realtime: a refusal is answered before the
// upgrade, in HTTP, as any call's.
func (g *Gateway) realtime(ctx *fasthttp.RequestCtx) {
	now := g.now()
	c := &call{g: g, ctx: ctx, rt: realtimeRoute, start: now, deadline: now.Add(g.opts.LiveMaxDuration)}
	c.event.Route, c.event.RequestID = realtimeRoute.name, requestIDOf(ctx)
	c.connection = c.event.RequestID
	g.inFlight.add() // until the connection's call ends
	lc, err := c.openLive()
	if err == nil {
		c.event.Status = fasthttp.StatusSwitchingProtocols
		c.ending = endCharge // the lease is settled at close
		if err = realtimeUpgrader.Upgrade(ctx, lc.run); err != nil {
			// The upgrader answered the client.
			lc.upstream.Close()
			c.ending = endRelease
			c.event.Status = ctx.Response.StatusCode()
			c.event.Outcome, c.event.Class = "bad_request", "terminal"
			c.event.Cause = fmt.Errorf("upgrade: %w", err)
			c.end()
		}
		return
	}
	c.refuse(err)
	c.event.Status = ctx.Response.StatusCode()
	c.end()
}

// openLive authenticates the connection, resolves its model and session,
// admits it and dials the provider. An error returned has not been
// answered; once the connection was admitted, c ends by releasing it.
func (c *call) openLive() (*liveConn, error) {
	g, ctx := c.g, c.ctx
	if !websocket.FastHTTPIsWebSocketUpgrade(ctx) {
		ctx.Response.Header.Set("Upgrade", "websocket")
		return nil, &apiError{status: fasthttp.StatusUpgradeRequired, typ: "invalid_request_error", anthType: "invalid_request_error",
			code: "upgrade_required", message: "GET /v1/realtime is a WebSocket: send the upgrade headers."}
	}
	c.ip = clientIP(ctx, g.opts.TrustedProxies)
	minted, err := c.authenticateLive()
	if err != nil {
		return nil, err
	}
	who := c.who
	c.bound.Model, c.bound.NoOutput, c.bound.N = string(ctx.QueryArgs().Peek("model")), true, 1
	if c.bound.Model == "" {
		return nil, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "missing_model", param: "model",
			message: "Name the model in the URL: /v1/realtime?model=..."}
	}
	c.event.Model = c.bound.Model
	m, tenant := g.lookup(c.bound.Model, &who)
	if m == nil {
		return nil, errUnknownModel(c.bound.Model)
	}
	c.model, c.tried = m, m
	if err := c.permitted(m, true, tenant); err != nil {
		return nil, err
	}
	d := m.liveDeployment()
	if d == nil {
		return nil, errWrongAPI(c.bound.Model, realtimeRoute)
	}
	c.event.Provider = d.provider.Name
	if err := c.readAttributes(m); err != nil {
		return nil, err
	}
	if err := c.joinMinted(minted, m); err != nil {
		return nil, err
	}
	c.event.SessionID = c.session.id
	c.maxWait = 0 // a live connection is answered at once
	c.event.Model = m.Name
	secs, err := c.admitConnection(m)
	if err != nil {
		return nil, err
	}
	c.adm, c.ending = &c.held, endRelease
	up, err := g.dialLive(m, c.ownKey, &ctx.Request.Header)
	if err != nil {
		return nil, err
	}
	lc := newLiveConn(c, m, up)
	lc.secs.first, lc.secs.reserved = secs, secs
	return lc, nil
}

// authenticateLive authenticates the connection: by a client secret of
// POST /v1/realtime/client_secrets (returning the session it was minted
// with), or as any call, by its key.
func (c *call) authenticateLive() (minted string, err error) {
	g, ctx := c.g, c.ctx
	secret := liveBearer(&ctx.Request.Header)
	if !strings.HasPrefix(secret, liveSecretPrefix) {
		who, asserted, err := g.authenticate(ctx, c.ip, &c.event)
		if err != nil {
			return "", err
		}
		c.who, c.asserted, c.authenticated = who, asserted, true
		c.event.Org, c.event.Workspace, c.event.KeyID = who.Org, who.Workspace, who.KeyID
		return "", nil
	}
	if g.preAuth != nil {
		if _, err := g.admitAddress(c.ip); err != nil {
			return "", err
		}
	}
	s, err := g.openLiveSecret(secret)
	if err != nil {
		return "", errBadToken("the client secret is invalid or has expired")
	}
	// The key it was minted with, looked up again as any call's key is:
	// revoked or expired since, its secrets are refused.
	key, err := g.lookupKey(s.Key)
	var te *tokenError
	switch {
	case errors.Is(err, ErrBadKey) || errors.As(err, &te) || err == nil && key.KeyID != s.Who.KeyID:
		return "", errBadToken("the key the client secret was minted with is no longer valid (revoked, expired or rotated)")
	case err != nil:
		return "", errKeyStore(err)
	}
	c.who, c.authenticated = s.Who, true
	c.event.Org, c.event.Workspace, c.event.KeyID = s.Who.Org, s.Who.Workspace, s.Who.KeyID
	return s.Session, nil
}

// joinMinted charges the connection to the session its client secret was
// minted with; a session header naming another is refused.
func (c *call) joinMinted(minted string, m *model) error {
	switch {
	case minted == "":
		return nil
	case c.session.id != "" && c.session.id != minted:
		return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "session_mismatch", param: HeaderSession,
			message: "The client secret was minted for another session than " + HeaderSession + " names; send one or the other."}
	case c.session.id == minted:
		return nil
	}
	return c.joinSession(minted, m)
}

// admitConnection admits the connection on m: its lease on concurrency
// rules, one request, no tokens, and its first slice of seconds (see
// MetricSeconds), which it returns.
func (c *call) admitConnection(m *model) (secs int64, err error) {
	t0 := c.g.now()
	defer func() { c.event.Decision += c.g.since(t0) }()
	room, err := c.secondsLeft(m)
	if err != nil {
		return 0, err
	}
	req := c.request(m, 0)
	secs = max(c.secondsSlice(0, room), 1)
	req.Max.Custom = map[string]int64{MetricSeconds: secs}
	req.Timeout = c.deadline.Sub(c.g.now())
	res, err := c.g.limiter.Admit(context.Background(), req)
	if err != nil {
		return 0, err
	}
	c.held = admission{model: m, res: res}
	c.event.Classes = res.Result().Classes
	return secs, nil
}

// liveDialer dials providers' realtime endpoints.
var liveDialer = websocket.Dialer{HandshakeTimeout: 10 * time.Second, Proxy: http.ProxyFromEnvironment}

// dialLive opens the provider's side of a live connection on m,
// authenticated with its key (or the client's own, ownKey), passing on the
// client's headers that select API behaviour.
func (g *Gateway) dialLive(m *model, ownKey string, client *fasthttp.RequestHeader) (*websocket.Conn, error) {
	d := m.liveDeployment()
	p := d.provider
	u := url.URL{Scheme: "ws", Host: p.host}
	if p.tls {
		u.Scheme = "wss"
	}
	q := url.Values{}
	switch {
	case p.Kind == KindMock:
		u.Path = p.prefix + realtimeRoute.path
		q.Set("model", d.upstream)
	case p.Kind == KindAzure && p.APIVersion != "":
		u.Path = p.prefix + "/openai/realtime"
		q.Set("api-version", p.APIVersion)
		q.Set("deployment", d.upstream)
	default: // the base URL ends with the version, as in the SDKs
		u.Path = p.prefix + strings.TrimPrefix(realtimeRoute.path, "/v1")
		q.Set("model", d.upstream)
	}
	u.RawQuery = q.Encode()
	h := http.Header{}
	key := p.APIKey
	if ownKey != "" {
		key = ownKey
	}
	switch {
	case key == "":
	case p.Kind == KindAzure:
		h.Set("api-key", key)
	default:
		h.Set("Authorization", "Bearer "+key)
	}
	if p.Organization != "" {
		h.Set("OpenAI-Organization", p.Organization)
	}
	if p.Project != "" {
		h.Set("OpenAI-Project", p.Project)
	}
	for _, name := range []string{"OpenAI-Beta", "traceparent", "tracestate"} {
		if v := client.Peek(name); len(v) > 0 {
			h.Set(name, string(v))
		}
	}
	conn, resp, err := liveDialer.Dial(u.String(), h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil && (resp.StatusCode == 401 || resp.StatusCode == 403) {
			return nil, errProviderAuth(p.Name, resp.StatusCode)
		}
		if errors.Is(err, websocket.ErrBadHandshake) && resp != nil {
			err = fmt.Errorf("%w: status %d", err, resp.StatusCode)
		}
		return nil, errUpstream(502, fmt.Errorf("realtime dial %s: %w", p.Name, err))
	}
	return conn, nil
}
