package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// TestJWTShaped checks which bearers are taken for JWTs.
func TestJWTShaped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bearer string
		want   bool
	}{
		{"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln", true},
		{"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.", true}, // alg none: refused by name, not as an API key
		{"a.b.c", true},
		{"sk-sluice-abcdefgh2345-0aZ9", false},
		{"", false},
		{"a.b", false},
		{"a.b.c.d", false},
		{".b.c", false},
		{"a..c", false},
		{"a.b.c=", false}, // padded base64 is not base64url as JWS writes it
		{"a+b.c.d", false},
		{"a.b.c ", false},
	}
	for _, tt := range tests {
		if got := jwtShaped(tt.bearer); got != tt.want {
			t.Errorf("jwtShaped(%q) = %v, want %v", tt.bearer, got, tt.want)
		}
	}
}

// FuzzJWTShaped checks the pre-parse against its definition: three parts
// of base64url characters, the first two not empty.
func FuzzJWTShaped(f *testing.F) {
	for _, s := range []string{"a.b.c", "a.b.", "sk-sluice-x", "..", "a.b.c.d", "eyJ.eyJ.sig"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parts := strings.Split(s, ".")
		want := len(parts) == 3 && parts[0] != "" && parts[1] != ""
		for _, p := range parts {
			if strings.Trim(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
				want = false
			}
		}
		if got := jwtShaped(s); got != want {
			t.Fatalf("jwtShaped(%q) = %v, want %v", s, got, want)
		}
	})
}

// FuzzJWTAuthenticate feeds arbitrary bearers to a JWTAuthenticator: it
// must not panic, a bearer not shaped like a JWT goes to the API keys, and
// one shaped like it is accepted with its claims' identity or refused as
// a bad credential, never as anything else.
func FuzzJWTAuthenticate(f *testing.F) {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	key, err := jwk.Import(raw)
	if err != nil {
		f.Fatal(err)
	}
	_ = key.Set(jwk.KeyIDKey, "k1")
	pub, err := key.PublicKey()
	if err != nil {
		f.Fatal(err)
	}
	set := jwk.NewSet()
	_ = set.AddKey(pub)
	body, _ := json.Marshal(set)
	path := filepath.Join(f.TempDir(), "jwks.json")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		f.Fatal(err)
	}
	next := &countingKeys{}
	a, err := NewJWTAuthenticator(context.Background(), JWTOptions{Next: next, MinRefresh: time.Hour, Issuers: []JWTIssuer{
		{Issuer: "iss", Audience: []string{"aud"}, JWKSFile: path},
	}})
	if err != nil {
		f.Fatal(err)
	}
	tok := jwt.New()
	for k, v := range map[string]any{"iss": "iss", "aud": "aud", "sub": "s", "org": "o", "workspace": "w", "exp": time.Now().Add(time.Hour).Unix()} {
		_ = tok.Set(k, v)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), key))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(signed))
	f.Add("eyJhbGciOiJub25lIn0.eyJpc3MiOiJpc3MifQ.")
	f.Add("sk-sluice-abc")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, bearer string) {
		before := next.calls
		p, err := a.Authenticate(context.Background(), bearer)
		if !jwtShaped(bearer) {
			if next.calls != before+1 {
				t.Fatalf("bearer %q did not go to the API keys", bearer)
			}
			return
		}
		switch {
		case err == nil:
			if !strings.HasPrefix(p.KeyID, "jwt:") || p.Workspace == "" || p.User == "" || p.Org == "" {
				t.Fatalf("accepted %q as %+v", bearer, p)
			}
		case !errors.Is(err, ErrBadKey):
			t.Fatalf("bearer %q: %v is not a bad credential", bearer, err)
		}
	})
}

// countingKeys refuses every API key and counts the calls.
type countingKeys struct{ calls int }

func (k *countingKeys) Authenticate(context.Context, string) (Principal, error) {
	k.calls++
	return Principal{}, ErrBadKey
}
