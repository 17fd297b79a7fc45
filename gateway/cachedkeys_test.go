package gateway_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// cachedKeys is a CachedAuthenticator: it answers from memory the secrets
// in cached (ErrBadKey for those mapped to a principal without KeyID), and
// leaves the rest to its store, noting whether each lookup there had a
// deadline.
type cachedKeys struct {
	store  gateway.Authenticator
	cached map[string]gateway.Principal

	mu      sync.Mutex
	lookups []bool // per store lookup: whether its context had a deadline
}

func (k *cachedKeys) Authenticate(ctx context.Context, secret string) (gateway.Principal, error) {
	_, has := ctx.Deadline()
	k.mu.Lock()
	k.lookups = append(k.lookups, has)
	k.mu.Unlock()
	return k.store.Authenticate(ctx, secret)
}

func (k *cachedKeys) AuthenticateCached(secret string) (gateway.Principal, bool, error) {
	p, ok := k.cached[secret]
	switch {
	case !ok:
		return gateway.Principal{}, false, nil
	case p.KeyID == "":
		return gateway.Principal{}, true, gateway.ErrBadKey
	}
	return p, true, nil
}

func (k *cachedKeys) storeLookups() []bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]bool(nil), k.lookups...)
}

const chatHi = `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`

// A key the cache answers is served without a store lookup; one it does
// not know goes to the store, within CatalogTimeout; a refusal from the
// cache is a 401 like the store's.
func TestGateway_CachedKeyNeedsNoStoreLookup(t *testing.T) {
	t.Parallel()
	keys := &cachedKeys{cached: map[string]gateway.Principal{
		testKey:             {KeyID: "k1", Org: "o1", Workspace: "w1", User: "u1"},
		"sk-sluice-revoked": {},
	}}
	h := newHarness(t, []sluice.Rule{dailyTokens}, func(o *gateway.Options) {
		keys.store = o.Keys
		o.Keys = keys
	})
	if r := h.post("/v1/chat/completions", chatHi, nil); r.status != 200 {
		t.Fatalf("cached key: %d %s", r.status, r.body)
	}
	if got := keys.storeLookups(); len(got) != 0 {
		t.Fatalf("cached key: %d store lookups, want none", len(got))
	}
	if r := h.post("/v1/chat/completions", chatHi, map[string]string{"Authorization": "Bearer sk-sluice-revoked"}); r.status != 401 {
		t.Fatalf("key refused by the cache: %d %s, want 401", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", chatHi, map[string]string{"Authorization": "Bearer sk-sluice-other"}); r.status != 200 {
		t.Fatalf("key the cache does not hold: %d %s", r.status, r.body)
	}
	if got := keys.storeLookups(); len(got) != 1 || !got[0] {
		t.Fatalf("store lookups (with a deadline) = %v, want one with a deadline", got)
	}
}

// A key the cache does not hold, behind a stalled store, is still answered
// 503 key_store_unavailable after CatalogTimeout.
func TestGateway_CacheMissLookupIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens}, func(o *gateway.Options) {
		o.Keys = &cachedKeys{store: slowKeys{fakeKeys: o.Keys.(fakeKeys), delay: time.Minute}}
		o.CatalogTimeout = 100 * time.Millisecond
	})
	start := time.Now()
	r := h.post("/v1/chat/completions", chatHi, nil)
	if took := time.Since(start); r.status != 503 || !strings.Contains(string(r.body), "key_store_unavailable") || took > 5*time.Second {
		t.Fatalf("%d %s after %v, want 503 key_store_unavailable after about 100ms", r.status, r.body, took)
	}
}

// A JWTAuthenticator asks the cache of the Authenticator it wraps for
// API keys, and leaves JWTs to Authenticate.
func TestJWT_AuthenticateCached(t *testing.T) {
	t.Parallel()
	key := newECKey(t, "ec-1")
	jwks := newJWKSServer(t, key)
	next := &cachedKeys{store: fakeKeys{}, cached: map[string]gateway.Principal{testKey: {KeyID: "k1"}}}
	a, err := gateway.NewJWTAuthenticator(t.Context(), gateway.JWTOptions{Next: next, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: jwks.url},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, err := a.AuthenticateCached(testKey); !ok || err != nil || p.KeyID != "k1" {
		t.Fatalf("cached API key: %+v, ok %v, err %v", p, ok, err)
	}
	if _, ok, err := a.AuthenticateCached("sk-sluice-unknown"); ok || err != nil {
		t.Fatalf("API key the cache does not hold: ok %v, err %v; want not answered", ok, err)
	}
	if _, ok, err := a.AuthenticateCached(sign(t, key, goodClaims())); ok || err != nil {
		t.Fatalf("JWT: ok %v, err %v; want not answered", ok, err)
	}
	// Wrapping an Authenticator without a cache, nothing is answered.
	plain, err := gateway.NewJWTAuthenticator(t.Context(), gateway.JWTOptions{Next: fakeKeys{testKey: {KeyID: "k1"}}, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: jwks.url},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := plain.AuthenticateCached(testKey); ok || errors.Is(err, gateway.ErrBadKey) {
		t.Fatalf("no cache: ok %v, err %v; want not answered", ok, err)
	}
}
