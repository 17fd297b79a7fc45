package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
)

// apiKeys accepts one API key.
type apiKeys struct{}

func (apiKeys) Authenticate(_ context.Context, secret string) (gateway.Principal, error) {
	if secret == "sk-sluice-good" {
		return gateway.Principal{KeyID: "k1", Org: "default", Workspace: "w", User: "u"}, nil
	}
	return gateway.Principal{}, gateway.ErrBadKey
}

// TestAuthenticatorOf checks the wiring of auth.jwt: without issuers the
// API keys alone; with them, tokens of an issuer mapped by its claims
// settings, and API keys still accepted.
func TestAuthenticatorOf(t *testing.T) {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := jwk.Import(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := key.Set(jwk.KeyIDKey, "k"); err != nil {
		t.Fatal(err)
	}
	pub, err := key.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	set := jwk.NewSet()
	if err := set.AddKey(pub); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}

	plain, err := config.Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := authenticatorOf(t.Context(), plain, apiKeys{}, nil); err != nil || a != (apiKeys{}) {
		t.Fatalf("without auth.jwt: %v, %v; want the API keys", a, err)
	}

	cfg, err := config.Parse([]byte(`
tiers: [{name: pro, percent: 100}]
auth:
  jwt:
    - issuer: app
      audience: [sluice]
      jwks_file: `+path+`
      org: acme
      claims: {workspace: tenant, user: email}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := authenticatorOf(t.Context(), cfg, apiKeys{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.New()
	for k, v := range map[string]any{"iss": "app", "aud": "sluice", "sub": "42", "exp": time.Now().Add(time.Hour).Unix(),
		"org": "other", "tenant": "t1", "email": "a@example.test", "team": "blue", "tier": "pro"} {
		if err := tok.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), key))
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(context.Background(), string(signed))
	if err != nil {
		t.Fatal(err)
	}
	if p.Org != "acme" || p.Workspace != "t1" || p.User != "a@example.test" || p.Team != "blue" || p.Tier != "pro" || p.KeyID == "" {
		t.Errorf("principal %+v", p)
	}
	if p, err := a.Authenticate(context.Background(), "sk-sluice-good"); err != nil || p.KeyID != "k1" {
		t.Errorf("API key through the JWT authenticator: %+v, %v", p, err)
	}
	if _, err := a.Authenticate(context.Background(), "sk-sluice-bad"); !errors.Is(err, gateway.ErrBadKey) {
		t.Errorf("bad API key: %v", err)
	}
}
