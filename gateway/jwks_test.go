package gateway_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway"
)

// TestJWT_KeyRotation rotates the issuer's keys: a token of the new key
// works at once, one of the removed key is refused once the JWKS was read
// again, and tokens naming unknown keys read it at most once per
// MinRefresh.
func TestJWT_KeyRotation(t *testing.T) {
	t.Parallel()
	oldKey, newKey := newRSAKey(t, "2026-01"), newECKey(t, "2026-02")
	jwks := newJWKSServer(t, oldKey)
	clk := &clock{}
	h := jwtHarness(t, nil, gateway.JWTOptions{Now: clk.now, MinRefresh: 10 * time.Second, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: jwks.url},
	}})
	call := func(k signingKey) reply {
		t.Helper()
		return h.post("/v1/chat/completions", jwtChat, bearerHeader(sign(t, k, goodClaims())))
	}
	if r := call(oldKey); r.status != 200 {
		t.Fatalf("old key before the rotation: %d %s", r.status, r.body)
	}
	jwks.serve(newKey)
	before := jwks.fetches.Load()
	if r := call(newKey); r.status != 200 {
		t.Fatalf("new key just after the rotation: %d %s", r.status, r.body)
	}
	if got := jwks.fetches.Load() - before; got != 1 {
		t.Errorf("the new key's first token fetched the JWKS %d times, want 1", got)
	}
	if r := call(oldKey); r.status != 401 || !strings.Contains(string(r.body), `its key \"2026-01\" is not one of its issuer's keys`) {
		t.Errorf("removed key after the refresh: %d %s", r.status, r.body)
	}
	// Made-up kids within MinRefresh of the last refresh fetch nothing.
	before = jwks.fetches.Load()
	for i := range 5 {
		if r := call(newECKey(t, fmt.Sprintf("made-up-%d", i))); r.status != 401 {
			t.Fatalf("made-up kid: %d %s", r.status, r.body)
		}
	}
	if got := jwks.fetches.Load() - before; got != 0 {
		t.Errorf("5 made-up kids fetched the JWKS %d times within MinRefresh", got)
	}
	// Past MinRefresh, a key added since is found.
	third := newECKey(t, "2026-03")
	jwks.serve(newKey, third)
	clk.advance(11 * time.Second)
	if r := call(third); r.status != 200 {
		t.Errorf("key added after MinRefresh: %d %s", r.status, r.body)
	}
	if r := call(newKey); r.status != 200 {
		t.Errorf("new key after a second rotation: %d %s", r.status, r.body)
	}
}

// TestJWT_JWKSDown starts with the issuer's JWKS endpoint failing: with no
// key to check against, tokens are answered 503 (the key store is
// unavailable), never 401 or 500, until the endpoint answers again.
func TestJWT_JWKSDown(t *testing.T) {
	t.Parallel()
	key := newECKey(t, "ec-1")
	jwks := newJWKSServer(t, key)
	jwks.down.Store(true)
	clk := &clock{}
	h := jwtHarness(t, nil, gateway.JWTOptions{Now: clk.now, FetchTimeout: 300 * time.Millisecond, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: jwks.url},
	}})
	token := sign(t, key, goodClaims())
	for i := range 2 {
		r := h.post("/v1/chat/completions", jwtChat, bearerHeader(token))
		if r.status != 503 || r.header.Get("Retry-After") != "1" {
			t.Fatalf("call %d with the JWKS down: %d %v %s", i, r.status, r.header, r.body)
		}
		if e := openaiError(t, r); deref(e.Error.Code) != "key_store_unavailable" {
			t.Errorf("code %q", deref(e.Error.Code))
		}
	}
	// API keys do not depend on it.
	if r := h.post("/v1/chat/completions", jwtChat, nil); r.status != 200 {
		t.Errorf("API key with the JWKS down: %d %s", r.status, r.body)
	}
	jwks.down.Store(false)
	clk.advance(11 * time.Second)
	if r := h.post("/v1/chat/completions", jwtChat, bearerHeader(token)); r.status != 200 {
		t.Errorf("once the JWKS answers: %d %s", r.status, r.body)
	}
}

// TestJWT_JWKSFile reads the keys from a file, and again when a token
// names a key the file did not hold: rewriting the file rotates them.
func TestJWT_JWKSFile(t *testing.T) {
	t.Parallel()
	oldKey, newKey := newRSAKey(t, "file-1"), newECKey(t, "file-2")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, publicSet(t, oldKey), 0o600); err != nil {
		t.Fatal(err)
	}
	h := jwtHarness(t, nil, gateway.JWTOptions{Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSFile: path, Org: "fixed-org"},
	}})
	// The issuer's org is fixed: a token needs no org claim.
	if r := h.post("/v1/chat/completions", jwtChat, bearerHeader(sign(t, oldKey, goodClaims().with("org", nil)))); r.status != 200 {
		t.Fatalf("file key: %d %s", r.status, r.body)
	}
	if err := os.WriteFile(path, publicSet(t, newKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := h.post("/v1/chat/completions", jwtChat, bearerHeader(sign(t, newKey, goodClaims()))); r.status != 200 {
		t.Fatalf("key written to the file since: %d %s", r.status, r.body)
	}
	if _, err := gateway.NewJWTAuthenticator(t.Context(), gateway.JWTOptions{Next: fakeKeys{}, Issuers: []gateway.JWTIssuer{
		{Issuer: testIssuer, Audience: []string{testAudience}, JWKSFile: filepath.Join(t.TempDir(), "missing.json")},
	}}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing JWKS file: %v, want os.ErrNotExist", err)
	}
}

// TestJWT_JWKSFetchBounded: the JWKS fetch follows a redirect within its
// URL's origin only, and reads at most 1 MiB of body; a fetch that breaks
// either rule leaves the issuer's tokens answered 503, never verified with
// keys from elsewhere.
func TestJWT_JWKSFetchBounded(t *testing.T) {
	t.Parallel()
	key := newECKey(t, "ec-1")
	elsewhere := newJWKSServer(t, key) // a perfectly good set, at another origin
	big := append([]byte(`{"pad":"`+strings.Repeat("x", 1<<20)+`",`), publicSet(t, key)[1:]...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/keys", http.StatusFound)
		case "/keys":
			w.Write(publicSet(t, key))
		case "/other":
			http.Redirect(w, r, elsewhere.url, http.StatusFound)
		case "/big":
			w.Write(big)
		}
	}))
	for _, tc := range []struct {
		path   string
		status int
	}{{"/same", 200}, {"/other", 503}, {"/big", 503}} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			// Each case waits out its fetch timeout when the set is refused:
			// the three run at once.
			t.Parallel()
			h := jwtHarness(t, nil, gateway.JWTOptions{FetchTimeout: 2 * time.Second, Issuers: []gateway.JWTIssuer{
				{Issuer: testIssuer, Audience: []string{testAudience}, JWKSURL: srv.URL + tc.path},
			}})
			if r := h.post("/v1/chat/completions", jwtChat, bearerHeader(sign(t, key, goodClaims()))); r.status != tc.status {
				t.Fatalf("JWKS at %s: %d %s, want %d", tc.path, r.status, r.body, tc.status)
			}
		})
	}
	// After the parallel cases: a Cleanup runs once they are all done.
	t.Cleanup(func() {
		srv.Close()
		if n := elsewhere.fetches.Load(); n != 0 {
			t.Errorf("the other origin was fetched %d times", n)
		}
	})
}
