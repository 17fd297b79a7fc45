package gateway

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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
// the application's in a form the device can read.
//
// The secret is sealed, not stored: it carries the key's principal, the
// credential the mint was authenticated with, the session and its expiry,
// encrypted and authenticated (AES-256-GCM) under a key derived from
// Options.LiveSecretKey, which replicas must share. The device can read
// nothing of it, nor change it. At connect, the credential is looked up
// again as any call's key is, so a key revoked (or expired, or rotated)
// after the mint ends its secrets at once.

// liveSecretPrefix starts every client secret of this gateway.
const liveSecretPrefix = "ek_sluice_"

// liveSecret is what a client secret carries.
type liveSecret struct {
	Who Principal `json:"who"`
	// Key is the credential the mint was authenticated with (an API key,
	// or a JWT), authenticated again at connect.
	Key       string `json:"key"`
	Session   string `json:"session"`
	ExpiresAt int64  `json:"exp"`
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
	secret, err := g.sealLiveSecret(liveSecret{Who: who, Key: bearer(&ctx.Request.Header), Session: s.ID, ExpiresAt: exp.Unix()})
	if err != nil {
		g.writeError(ctx, rt, err)
		ev.Model, ev.Cause, ev.Outcome, ev.Class = s.Model, causeOf(err), "bad_request", "terminal"
		g.observe(ctx, ev)
		return
	}
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

// liveSecretLabel derives the key client secrets are sealed with from
// Options.LiveSecretKey, and binds a sealed secret to its use.
const liveSecretLabel = "sluice realtime client secret v2"

// liveAEAD is the AES-256-GCM client secrets are sealed with.
func (g *Gateway) liveAEAD() cipher.AEAD {
	m := hmac.New(sha256.New, g.opts.LiveSecretKey)
	m.Write([]byte(liveSecretLabel))
	block, _ := aes.NewCipher(m.Sum(nil)) // never fails: the key is 32 bytes
	aead, _ := cipher.NewGCM(block)       // never fails with aes
	return aead
}

// sealLiveSecret makes the client secret of s: its JSON, encrypted under a
// random nonce, which leads it.
func (g *Gateway) sealLiveSecret(s liveSecret) (string, error) {
	payload, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("seal client secret: %w", err)
	}
	aead := g.liveAEAD()
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(payload)+aead.Overhead())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	sealed := aead.Seal(nonce, nonce, payload, []byte(liveSecretLabel))
	return liveSecretPrefix + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// errBadSecret refuses a client secret that is forged, malformed or
// expired.
var errBadSecret = errors.New("client secret invalid or expired")

// openLiveSecret returns what a client secret carries, if this gateway
// (or one sharing its LiveSecretKey) sealed it and it has not expired.
func (g *Gateway) openLiveSecret(secret string) (liveSecret, error) {
	var s liveSecret
	sealed, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(secret, liveSecretPrefix))
	aead := g.liveAEAD()
	if err != nil || len(sealed) < aead.NonceSize()+aead.Overhead() {
		return s, errBadSecret
	}
	nonce, box := sealed[:aead.NonceSize()], sealed[aead.NonceSize():]
	payload, err := aead.Open(nil, nonce, box, []byte(liveSecretLabel))
	if err != nil || json.Unmarshal(payload, &s) != nil || g.now().Unix() >= s.ExpiresAt || s.Session == "" || s.Key == "" {
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
