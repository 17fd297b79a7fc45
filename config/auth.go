package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Auth lists the trusted records besides the API keys of the catalog that
// may carry a request's identity.
type Auth struct {
	// JWT lists the issuers whose signed bearer tokens are accepted in
	// place of an API key.
	JWT []JWTIssuer `yaml:"jwt,omitempty"`
}

// JWTIssuer is an issuer of JWT bearer tokens: a token whose iss is Issuer,
// whose aud holds one of Audience, and whose signature verifies with a key
// of the issuer's JWKS is a trusted identity record, its claims giving the
// request's attributes.
type JWTIssuer struct {
	// Issuer is the token's iss, matched exactly. Required.
	Issuer string `yaml:"issuer"`
	// Audience is one value or a list; the token's aud must contain one of
	// them. Required.
	Audience StringList `yaml:"audience"`
	// JWKSURL is where the issuer publishes its keys (https://, or http://
	// to a loopback address). Exactly one of JWKSURL and JWKSFile is set.
	JWKSURL string `yaml:"jwks_url,omitempty"`
	// JWKSFile is a file holding the issuer's keys as a JWK set; it is read
	// again when a token names a key it lacks.
	JWKSFile string `yaml:"jwks_file,omitempty"`
	// Org, when set, is the org of every token of this issuer: the org
	// claim is then ignored, so the issuer can assert identities in that
	// org only.
	Org string `yaml:"org,omitempty"`
	// Claims names the claims that give the attributes.
	Claims JWTClaims `yaml:"claims,omitempty"`
}

// JWTClaims names, for each attribute of an identity, the claim of a token
// that gives it. Workspace, user and org (unless the issuer fixes it) are
// required in every token; team, tier and class are optional.
type JWTClaims struct {
	// Org is the claim naming the org ("org").
	Org string `yaml:"org,omitempty"`
	// Workspace is the claim naming the workspace ("workspace").
	Workspace string `yaml:"workspace,omitempty"`
	// User is the claim naming the user ("sub").
	User string `yaml:"user,omitempty"`
	// Team is the claim naming the team ("team").
	Team string `yaml:"team,omitempty"`
	// Tier is the claim naming the tier ("tier").
	Tier string `yaml:"tier,omitempty"`
	// Class is the claim naming the priority class, which replaces the
	// tier's; empty (the default) reads none, so that a claim of that
	// name meant for something else never sets one.
	Class string `yaml:"class,omitempty"`
}

// The claims that give an identity's attributes when a JWT issuer names
// none.
const (
	DefaultClaimOrg       = "org"
	DefaultClaimWorkspace = "workspace"
	DefaultClaimUser      = "sub"
	DefaultClaimTeam      = "team"
	DefaultClaimTier      = "tier"
)

// StringList is a list of strings that YAML may also write as one string.
type StringList []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (l *StringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*l = StringList{s}
		return nil
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		*l = list
		return nil
	}
	return fmt.Errorf("line %d: must be one string or a list of strings", n.Line)
}

func (a *Auth) applyDefaults() {
	for i := range a.JWT {
		c := &a.JWT[i].Claims
		for _, d := range []struct {
			field *string
			claim string
		}{
			{&c.Org, DefaultClaimOrg},
			{&c.Workspace, DefaultClaimWorkspace},
			{&c.User, DefaultClaimUser},
			{&c.Team, DefaultClaimTeam},
			{&c.Tier, DefaultClaimTier},
		} {
			if *d.field == "" {
				*d.field = d.claim
			}
		}
	}
}

func (v *checker) auth() {
	issuers := map[string]int{}
	for i := range v.c.Auth.JWT {
		iss := &v.c.Auth.JWT[i]
		at := fmt.Sprintf("auth.jwt[%d]", i)
		switch j, dup := issuers[iss.Issuer]; {
		case iss.Issuer == "":
			v.add(at+".issuer", "is empty")
		case dup:
			v.add(at+".issuer", "%q is also the issuer of auth.jwt[%d]", iss.Issuer, j)
		default:
			issuers[iss.Issuer] = i
		}
		if len(iss.Audience) == 0 {
			v.add(at+".audience", "is empty: name the audience (aud) the tokens are issued for")
		}
		for j, a := range iss.Audience {
			if a == "" {
				v.add(fmt.Sprintf("%s.audience[%d]", at, j), "is empty")
			}
		}
		switch {
		case iss.JWKSURL == "" && iss.JWKSFile == "":
			v.add(at, "needs jwks_url or jwks_file: where the issuer's keys are")
		case iss.JWKSURL != "" && iss.JWKSFile != "":
			v.add(at, "has both jwks_url and jwks_file: give one")
		case iss.JWKSURL != "":
			if !jwksURLAllowed(iss.JWKSURL) {
				v.add(at+".jwks_url", "%q is not an https:// URL (http:// is accepted only to a loopback address)", iss.JWKSURL)
			}
		}
		if iss.Org != "" && !plainValue(iss.Org) {
			v.add(at+".org", "must be at most 256 bytes with no control characters")
		}
	}
}

// jwksURLAllowed accepts https:// URLs, and http:// ones to a loopback
// host: keys fetched in the clear from elsewhere could be swapped on the
// way, and whoever swaps them can mint any identity.
func jwksURLAllowed(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		host := u.Hostname()
		ip := net.ParseIP(host)
		return host == "localhost" || ip != nil && ip.IsLoopback()
	}
	return false
}

// plainValue reports whether s can be an attribute value: at most 256 bytes
// and no control characters.
func plainValue(s string) bool {
	return len(s) <= 256 && !strings.ContainsFunc(s, unicode.IsControl)
}
