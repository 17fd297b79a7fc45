package config

import (
	"reflect"
	"testing"
)

// TestParse_JWTIssuers checks the auth.jwt section: a single audience or a
// list, the claim defaults, and a fixed org.
func TestParse_JWTIssuers(t *testing.T) {
	defaults := JWTClaims{Org: "org", Workspace: "workspace", User: "sub", Team: "team", Tier: "tier"}
	tests := []struct {
		name string
		yaml string
		want []JWTIssuer
	}{
		{
			name: "none",
			yaml: "listen: 127.0.0.1:8080\n",
		},
		{
			name: "one audience, default claims",
			yaml: "auth:\n  jwt:\n    - {issuer: a, audience: sluice, jwks_url: 'https://a.example/jwks'}\n",
			want: []JWTIssuer{{Issuer: "a", Audience: StringList{"sluice"}, JWKSURL: "https://a.example/jwks", Claims: defaults}},
		},
		{
			name: "list of audiences, loopback http, some claims named",
			yaml: "auth:\n  jwt:\n    - issuer: a\n      audience: [x, y]\n      jwks_url: http://127.0.0.1:9999/jwks\n      claims: {workspace: ws, user: email}\n",
			want: []JWTIssuer{{Issuer: "a", Audience: StringList{"x", "y"}, JWKSURL: "http://127.0.0.1:9999/jwks",
				Claims: JWTClaims{Org: "org", Workspace: "ws", User: "email", Team: "team", Tier: "tier"}}},
		},
		{
			name: "file and fixed org",
			yaml: "auth:\n  jwt:\n    - {issuer: b, audience: sluice, jwks_file: keys.json, org: acme}\n",
			want: []JWTIssuer{{Issuer: "b", Audience: StringList{"sluice"}, JWKSFile: "keys.json", Org: "acme", Claims: defaults}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Auth.JWT, tt.want) {
				t.Errorf("Auth.JWT = %+v\nwant %+v", c.Auth.JWT, tt.want)
			}
		})
	}
}

// TestLoad_FullJWT checks the auth section of the full example.
func TestLoad_FullJWT(t *testing.T) {
	c, err := Load("testdata/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []JWTIssuer{
		{Issuer: "https://login.example.com/", Audience: StringList{"sluice", "sluice-staging"},
			JWKSURL: "https://login.example.com/.well-known/jwks.json",
			Claims:  JWTClaims{Org: "tenant", Workspace: "https://example.com/workspace", User: "email", Team: "group", Tier: "plan", Class: "priority"}},
		{Issuer: "partner", Audience: StringList{"sluice"}, JWKSFile: "/etc/sluice/partner-jwks.json", Org: "partner-co",
			Claims: JWTClaims{Org: "org", Workspace: "workspace", User: "sub", Team: "team", Tier: "tier"}},
	}
	if !reflect.DeepEqual(c.Auth.JWT, want) {
		t.Errorf("Auth.JWT = %+v\nwant %+v", c.Auth.JWT, want)
	}
}
