package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// POST /v1/realtime/client_secrets is the gate of a live session, in the
// provider's shape: with the key of a server application, it mints a
// Sluice session (as POST /v1/sessions does: every budget checked, the
// model of the key's tier, the ceilings, Idempotency-Key, the open-session
// cap) and returns a short-lived secret bound to it, which a browser or a
// phone connects to GET /v1/realtime with (in Authorization, or as the
// subprotocol openai-insecure-api-key.SECRET): never a provider key, nor
// the application's.
//
// The secret is signed, not stored: it carries the key's principal, the
// session and its expiry, under Options.LiveSecretKey, which replicas
// must share. A key revoked after the mint keeps its secrets until they
// expire (10 minutes by default, at most 2 hours).

// liveSecretPrefix starts every client secret of this gateway.
const liveSecretPrefix = "ek_sluice_"

// liveSecret is what a client secret carries.
type liveSecret struct {
	Who       Principal `json:"who"`
	Session   string    `json:"session"`
	ExpiresAt int64     `json:"exp"`
}

// clientSecretRequest is the part of the provider's request the gateway
// reads: the secret's lifetime. The session's model and ceilings are the
// gateway's.
type clientSecretRequest struct {
	ExpiresAfter *struct {
		Anchor  string `json:"anchor"`
		Seconds int64  `json:"seconds"`
	} `json:"expires_after"`
}

// clientSecrets serves POST /v1/realtime/client_secrets.
func (g *Gateway) clientSecrets(ctx *fasthttp.RequestCtx) {
	rt := realtimeRoute
	if g.opts.Sessions == nil {
		g.refuseEarly(ctx, string(ctx.Path()), errNotFound(string(ctx.Path())))
		return
	}
	var ev Event
	who, _, err := g.authenticate(ctx, clientIP(ctx, g.opts.TrustedProxies), &ev)
	if err != nil {
		g.refuseEarly(ctx, string(ctx.Path()), err)
		return
	}
	ev = Event{Route: "client_secrets", Org: who.Org, Workspace: who.Workspace, KeyID: who.KeyID, IgnoredIdentity: ev.IgnoredIdentity}
	lifetime, err := secretLifetime(ctx.PostBody())
	terms := g.opts.Sessions.Terms(who)
	var s Session
	var created bool
	if err == nil {
		s, created, _, err = g.mintSession(ctx, who, terms, nil)
	}
	if err != nil {
		g.withRoom(err, principalIdentity(&who, terms.Model))
		g.writeError(ctx, rt, err)
		ev.Model, ev.Cause = terms.Model, causeOf(err)
		ev.Outcome, ev.Class = outcomeOf(err)
		g.observe(ctx, ev)
		return
	}
	exp := g.now().Add(lifetime)
	secret := g.signLiveSecret(liveSecret{Who: who, Session: s.ID, ExpiresAt: exp.Unix()})
	body, _ := json.Marshal(map[string]any{
		"value": secret, "expires_at": exp.Unix(),
		"session":        map[string]any{"type": "realtime", "object": "realtime.session", "model": s.Model},
		"sluice_session": map[string]any{"id": s.ID, "expires_at": s.ExpiresAt.Unix()},
	})
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
	ev.Model, ev.Outcome = s.Model, outcomeAdmitted
	if created {
		ev.Session = "opened"
	}
	g.observe(ctx, ev)
}

// secretLifetime reads expires_after.seconds (10 to 7200; 600 when
// absent), as the provider does.
func secretLifetime(body []byte) (time.Duration, error) {
	var req clientSecretRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return 0, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_json",
				message: "The request is not valid JSON: " + err.Error()}
		}
	}
	if req.ExpiresAfter == nil || req.ExpiresAfter.Seconds == 0 {
		return 10 * time.Minute, nil
	}
	if s := req.ExpiresAfter.Seconds; s < 10 || s > 7200 {
		return 0, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_value",
			param: "expires_after.seconds", message: "expires_after.seconds must be between 10 and 7200."}
	}
	return time.Duration(req.ExpiresAfter.Seconds) * time.Second, nil
}

// signLiveSecret makes the client secret of s.
func (g *Gateway) signLiveSecret(s liveSecret) string {
	payload, _ := json.Marshal(s)
	p := base64.RawURLEncoding.EncodeToString(payload)
	return liveSecretPrefix + p + "." + base64.RawURLEncoding.EncodeToString(g.liveMAC(p))
}

func (g *Gateway) liveMAC(payload string) []byte {
	m := hmac.New(sha256.New, g.opts.LiveSecretKey)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// errBadSecret refuses a client secret that is forged, malformed or
// expired.
var errBadSecret = errors.New("client secret invalid or expired")

// verifyLiveSecret returns what a client secret carries, if this gateway
// (or one sharing its LiveSecretKey) signed it and it has not expired.
func (g *Gateway) verifyLiveSecret(secret string) (liveSecret, error) {
	var s liveSecret
	p, sig, ok := strings.Cut(strings.TrimPrefix(secret, liveSecretPrefix), ".")
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil || !hmac.Equal(mac, g.liveMAC(p)) {
		return s, errBadSecret
	}
	payload, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil || json.Unmarshal(payload, &s) != nil || g.now().Unix() >= s.ExpiresAt || s.Session == "" {
		return s, errBadSecret
	}
	return s, nil
}

// liveBearer is the secret a live connection presents: its bearer, or,
// from a browser (which cannot set headers on a WebSocket), the
// subprotocol openai-insecure-api-key.SECRET.
func liveBearer(h *fasthttp.RequestHeader) string {
	if b := bearer(h); b != "" {
		return b
	}
	for _, p := range strings.Split(string(h.Peek("Sec-WebSocket-Protocol")), ",") {
		if k, ok := strings.CutPrefix(strings.TrimSpace(p), "openai-insecure-api-key."); ok {
			return k
		}
	}
	return ""
}
