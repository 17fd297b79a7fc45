package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

const (
	testIssuer   = "https://login.test/"
	testAudience = "sluice"
)

// signingKey is a private key with its kid and alg.
type signingKey struct {
	private jwk.Key
	raw     any
	alg     jwa.SignatureAlgorithm
}

func newRSAKey(t *testing.T, kid string) signingKey {
	t.Helper()
	raw, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return importKey(t, raw, kid, jwa.RS256())
}

func newECKey(t *testing.T, kid string) signingKey {
	t.Helper()
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return importKey(t, raw, kid, jwa.ES256())
}

func importKey(t *testing.T, raw any, kid string, alg jwa.SignatureAlgorithm) signingKey {
	t.Helper()
	k, err := jwk.Import(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.AlgorithmKey, alg); err != nil {
		t.Fatal(err)
	}
	return signingKey{private: k, raw: raw, alg: alg}
}

// publicSet is the JWKS of keys.
func publicSet(t *testing.T, keys ...signingKey) []byte {
	t.Helper()
	set := jwk.NewSet()
	for _, k := range keys {
		pub, err := k.private.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := set.AddKey(pub); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// claims are a token's claims; nil values are left out.
type claims map[string]any

// goodClaims are the claims of a token that is accepted.
func goodClaims() claims {
	now := time.Now()
	return claims{"iss": testIssuer, "aud": testAudience, "sub": "alice", "org": "acme", "workspace": "ws1",
		"team": "red", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix()}
}

// with returns c with the given claims replaced (a nil value removes one).
func (c claims) with(kv ...any) claims {
	out := claims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// sign returns c signed by k, its kid in the header.
func sign(t *testing.T, k signingKey, c claims) string {
	t.Helper()
	tok := jwt.New()
	for name, v := range c {
		if err := tok.Set(name, v); err != nil {
			t.Fatalf("claim %s: %v", name, err)
		}
	}
	b, err := jwt.Sign(tok, jwt.WithKey(k.alg, k.private))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// signAs signs c with a raw key under alg, with kid in the header (none
// when empty): for tokens whose header does not match their key.
func signAs(t *testing.T, alg jwa.SignatureAlgorithm, raw any, kid string, c claims) string {
	t.Helper()
	tok := jwt.New()
	for name, v := range c {
		if err := tok.Set(name, v); err != nil {
			t.Fatalf("claim %s: %v", name, err)
		}
	}
	h := jws.NewHeaders()
	if kid != "" {
		if err := h.Set(jws.KeyIDKey, kid); err != nil {
			t.Fatal(err)
		}
	}
	b, err := jwt.Sign(tok, jwt.WithKey(alg, raw, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rawToken builds a compact JWS from a header and claims as given, with
// sig as its signature part: for tokens no library would sign.
func rawToken(t *testing.T, header map[string]any, c claims, sig string) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(header) + "." + enc(c) + "." + sig
}

// jwksServer serves a JWKS that a test may replace, or fail.
type jwksServer struct {
	t       *testing.T
	mu      sync.Mutex
	body    []byte
	down    atomic.Bool
	fetches atomic.Int64
	url     string
}

func newJWKSServer(t *testing.T, keys ...signingKey) *jwksServer {
	t.Helper()
	s := &jwksServer{t: t, body: publicSet(t, keys...)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/jwks.json"
	return s
}

// serve replaces the keys served.
func (s *jwksServer) serve(keys ...signingKey) {
	body := publicSet(s.t, keys...)
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

// clock is a settable clock that starts at the real time.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// jwtHarness is a gateway whose Keys are a JWTAuthenticator in front of
// the harness's API keys.
func jwtHarness(t *testing.T, rules []sluice.Rule, opts gateway.JWTOptions) *harness {
	t.Helper()
	return newHarness(t, rules, func(o *gateway.Options) {
		opts.Next = o.Keys
		a, err := gateway.NewJWTAuthenticator(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		o.Keys = a
	})
}

const jwtChat = `{"model":"mock-small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`

// TestJWT_AdmittedAndChargedToClaims sends calls with tokens of RSA and EC
// keys: each is admitted and charged to the workspace, user, team and org
// of its claims, under a key id of its subject; API keys still work.
func TestJWT_AdmittedAndChargedToClaims(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := newRSAKey(t, "rsa-1"), newECKey(t, "ec-1")
	jwks := newJWKSServer(t, rsaKey, ecKey)
	rules := []sluice.Rule{
		{Name: "per_user", Kind: sluice.KindBudget, Subject: "workspace+user", Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_team", Kind: sluice.KindBudget, Subject: "team", Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_org", Kind: sluice.KindBudget, Subject: "org", Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_key", Kind: sluice.KindBudget, Subject: "key", Limit: 100, Period: sluice.PeriodDay},
	}
	h := jwtHarness(t, rules, gateway.JWTOptions{Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{"other", testAudience}, JWKSURL: jwks.url},
	}})
	for _, k := range []signingKey{rsaKey, ecKey} {
		if r := h.post("/v1/chat/completions", jwtChat, bearerHeader(sign(t, k, goodClaims()))); r.status != 200 {
			t.Fatalf("%s token: %d %s", k.alg, r.status, r.body)
		}
	}
	// The same token in x-api-key, on the Anthropic route.
	if r := h.post("/v1/messages", jwtChat, map[string]string{"x-api-key": sign(t, rsaKey, goodClaims())}); r.status != 200 {
		t.Fatalf("x-api-key token: %d %s", r.status, r.body)
	}
	who := sluice.Identity{Org: "acme", Workspace: "ws1", User: "alice", Team: "red"}
	for _, rule := range []string{"per_user", "per_team", "per_org"} {
		if got := h.usedBy(who, rule); got != 3 {
			t.Errorf("rule %s charged %d to the claims' identity, want 3", rule, got)
		}
	}
	// GET /v1/models, which needs a key, takes a token too.
	if r := h.get("/v1/models", bearerHeader(sign(t, ecKey, goodClaims()))); r.status != 200 || !strings.Contains(string(r.body), "mock-small") {
		t.Errorf("GET /v1/models with a token: %d %s", r.status, r.body)
	}
	for _, u := range h.rec.waitUsage(t, 3) {
		if u.Workspace != "ws1" {
			t.Errorf("usage recorded for workspace %q, want ws1", u.Workspace)
		}
	}
	if r := h.post("/v1/chat/completions", jwtChat, nil); r.status != 200 {
		t.Fatalf("API key beside JWTs: %d %s", r.status, r.body)
	}
	if got := h.used("per_key"); got != 1 {
		t.Errorf("the API key was charged %d, want 1 (its own call only)", got)
	}
}

// TestJWT_KeyIDIsStable checks the principal's key id: one per subject and
// issuer, the same for every token of that subject, and no part of the
// token.
func TestJWT_KeyIDIsStable(t *testing.T) {
	t.Parallel()
	key := newECKey(t, "ec-1")
	jwks := newJWKSServer(t, key)
	other := newJWKSServer(t, key)
	a, err := gateway.NewJWTAuthenticator(t.Context(), gateway.JWTOptions{Next: fakeKeys{}, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: jwks.url},
		{Issuer: "second", Audience: []string{testAudience}, JWKSURL: other.url},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := func(c claims) string {
		t.Helper()
		token := sign(t, key, c)
		p, err := a.Authenticate(context.Background(), token)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.KeyID, "jwt:") || strings.Contains(token, strings.TrimPrefix(p.KeyID, "jwt:")) {
			t.Fatalf("KeyID %q", p.KeyID)
		}
		return p.KeyID
	}
	alice := id(goodClaims())
	if again := id(goodClaims().with("workspace", "ws2", "iat", time.Now().Add(-time.Second).Unix())); again != alice {
		t.Errorf("two tokens of alice: key ids %s and %s", alice, again)
	}
	if bob := id(goodClaims().with("sub", "bob")); bob == alice {
		t.Errorf("bob has alice's key id %s", bob)
	}
	if elsewhere := id(goodClaims().with("iss", "second")); elsewhere == alice {
		t.Errorf("alice at another issuer has the same key id %s", elsewhere)
	}
}

// TestJWT_Refusals sends every kind of bad token: each is 401 with a
// message saying what is wrong, and never reaches the provider.
func TestJWT_Refusals(t *testing.T) {
	t.Parallel()
	key, stranger := newRSAKey(t, "rsa-1"), newRSAKey(t, "nope")
	jwks := newJWKSServer(t, key)
	h := jwtHarness(t, nil, gateway.JWTOptions{Tiers: []string{"free", "pro"}, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: jwks.url},
	}})
	good := goodClaims()
	now := time.Now()
	pubJSON := publicSet(t, key)
	tampered := strings.Split(sign(t, key, good), ".")
	tampered[1] = strings.Split(sign(t, key, good.with("workspace", "ws-other")), ".")[1]
	tests := []struct {
		name, token, want string
	}{
		{"alg none", rawToken(t, map[string]any{"alg": "none", "kid": "rsa-1"}, good, ""), `its alg "none" is not accepted`},
		{"HMAC keyed with the public key", signAs(t, jwa.HS256(), pubJSON, "rsa-1", good), `its alg "HS256" is not accepted`},
		{"wrong audience", sign(t, key, good.with("aud", "elsewhere")), `its audience (aud) is not "sluice"`},
		{"no audience", sign(t, key, good.with("aud", nil)), `its audience (aud) is not "sluice"`},
		{"wrong issuer", sign(t, key, good.with("iss", "https://evil.test/")), `its issuer "https://evil.test/" is not trusted`},
		{"no issuer", sign(t, key, good.with("iss", nil)), "it has no iss claim"},
		{"expired", sign(t, key, good.with("exp", now.Add(-time.Hour).Unix())), "it has expired"},
		{"not yet valid", sign(t, key, good.with("nbf", now.Add(time.Hour).Unix())), "it is not valid yet (nbf)"},
		{"issued in the future", sign(t, key, good.with("iat", now.Add(time.Hour).Unix())), "it was issued in the future (iat)"},
		{"no exp", sign(t, key, good.with("exp", nil)), "it has no exp claim: tokens must expire"},
		{"unknown kid", sign(t, stranger, good), `its key "nope" is not one of its issuer's keys`},
		{"no kid", signAs(t, jwa.RS256(), key.raw, "", good), "it has no kid header naming its key"},
		{"signed by another key", signAs(t, jwa.RS256(), stranger.raw, "rsa-1", good), "its signature does not verify"},
		{"payload swapped", strings.Join(tampered, "."), "its signature does not verify"},
		{"alg not the key's", signAs(t, jwa.RS384(), key.raw, "rsa-1", good), `its alg RS384 is not the alg of its key "rsa-1" (RS256)`},
		{"claims not JSON", "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln", "its claims are not well-formed"},
		{"garbage parts", "abc.def.ghi", "it is not a well-formed JWT"},
		{"claims not an object", rawToken(t, map[string]any{"alg": "RS256", "kid": "rsa-1"}, nil, "c2ln"), "its claims are not well-formed"},
		{"header not JSON", "bm90IGpzb24.e30.c2ln", "it is not a well-formed JWT"},
		{"oversized", sign(t, key, good.with("pad", strings.Repeat("x", 9000))), "it is larger than 8192 bytes"},
		{"no workspace", sign(t, key, good.with("workspace", nil)), `it has no "workspace" claim, which gives the workspace`},
		{"no sub", sign(t, key, good.with("sub", nil)), `it has no "sub" claim`},
		{"no org", sign(t, key, good.with("org", nil)), `it has no "org" claim, which gives the org (or set the issuer's org)`},
		{"workspace not a string", sign(t, key, good.with("workspace", 42)), `its "workspace" claim, which gives the workspace, is not a string`},
		{"workspace too long", sign(t, key, good.with("workspace", strings.Repeat("w", 257))), "is longer than 256 bytes or holds control characters"},
		{"control character", sign(t, key, good.with("team", "red\nblue")), `its "team" claim, which gives the team, is longer than 256 bytes or holds control characters`},
		{"C1 control character", sign(t, key, good.with("sub", "u\u0085")), `its "sub" claim, which gives the user, is longer than 256 bytes or holds control characters`},
		{"unknown tier", sign(t, key, good.with("tier", "gold")), `its tier "gold" is not a tier of this gateway`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
				r := h.post(path, jwtChat, bearerHeader(tt.token))
				if r.status != 401 {
					t.Fatalf("%s: status %d, want 401: %s", path, r.status, r.body)
				}
				var msg string
				if path == "/v1/messages" {
					msg = anthropicError(t, r).Error.Message
				} else {
					e := openaiError(t, r)
					msg = e.Error.Message
					if deref(e.Error.Code) != "invalid_token" {
						t.Errorf("code %q, want invalid_token", deref(e.Error.Code))
					}
				}
				if !strings.HasPrefix(msg, "Invalid bearer token: ") || !strings.Contains(msg, tt.want) {
					t.Errorf("%s: message %q, want one containing %q", path, msg, tt.want)
				}
			}
		})
	}
	if n := h.mockCalls(); n != 0 {
		t.Errorf("the provider got %d calls", n)
	}
	// A tier the gateway knows is accepted.
	if r := h.post("/v1/chat/completions", jwtChat, bearerHeader(sign(t, key, good.with("tier", "pro")))); r.status != 200 {
		t.Errorf("token of tier pro: %d %s", r.status, r.body)
	}
}

// TestJWT_FixedOrg checks that an issuer with a fixed org puts every token
// in it, whatever the token's org claim says.
func TestJWT_FixedOrg(t *testing.T) {
	t.Parallel()
	key := newECKey(t, "ec-1")
	jwks := newJWKSServer(t, key)
	a, err := gateway.NewJWTAuthenticator(t.Context(), gateway.JWTOptions{Next: fakeKeys{}, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: jwks.url, Org: "partner",
			Claims: gateway.JWTClaims{Workspace: "ws", User: "email", Team: "group"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    claims
		want gateway.Principal
	}{
		{"org claim ignored", claims{"org": "acme", "ws": "w", "email": "a@b.test", "group": "g"},
			gateway.Principal{Org: "partner", Workspace: "w", User: "a@b.test", Team: "g"}},
		{"no org claim, no team", claims{"ws": "w", "email": "a@b.test"},
			gateway.Principal{Org: "partner", Workspace: "w", User: "a@b.test"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c.with("iss", testIssuer, "aud", testAudience, "sub", "s1", "exp", time.Now().Add(time.Hour).Unix())
			p, err := a.Authenticate(context.Background(), sign(t, key, c))
			if err != nil {
				t.Fatal(err)
			}
			p.KeyID = ""
			if p.Org != tt.want.Org || p.Workspace != tt.want.Workspace || p.User != tt.want.User || p.Team != tt.want.Team || p.Tier != "" {
				t.Errorf("principal %+v, want %+v", p, tt.want)
			}
		})
	}
}

// TestJWT_ClassClaim checks that the claim an issuer names for the class
// gives the principal's class, is refused when it is no class name, and
// that without one named no claim is read.
func TestJWT_ClassClaim(t *testing.T) {
	t.Parallel()
	key := newECKey(t, "ec-1")
	jwks, other := newJWKSServer(t, key), newJWKSServer(t, key)
	a, err := gateway.NewJWTAuthenticator(t.Context(), gateway.JWTOptions{Next: fakeKeys{}, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: jwks.url, Claims: gateway.JWTClaims{Class: "priority"}},
		{Issuer: "second", Audience: []string{testAudience}, JWKSURL: other.url},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(context.Background(), sign(t, key, goodClaims().with("priority", "batch")))
	if err != nil || p.Class != "batch" {
		t.Fatalf("token with priority batch: %+v, %v", p, err)
	}
	p, err = a.Authenticate(context.Background(), sign(t, key, goodClaims()))
	if err != nil || p.Class != "" {
		t.Fatalf("token without the class claim: %+v, %v", p, err)
	}
	_, err = a.Authenticate(context.Background(), sign(t, key, goodClaims().with("priority", "low priority")))
	if !errors.Is(err, gateway.ErrBadKey) || !strings.Contains(err.Error(), `its "priority" claim, which gives the class, "low priority" must not contain spaces`) {
		t.Fatalf("token with a class that is no name: %v", err)
	}
	// An issuer that names no class claim reads none, whatever the token holds.
	p, err = a.Authenticate(context.Background(), sign(t, key, goodClaims().with("iss", "second", "priority", "batch", "class", "a b")))
	if err != nil || p.Class != "" {
		t.Fatalf("token of an issuer without a class claim: %+v, %v", p, err)
	}
}
