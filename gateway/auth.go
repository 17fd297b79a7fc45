package gateway

import (
	"bytes"
	"context"
	"errors"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/valyala/fasthttp"
)

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
