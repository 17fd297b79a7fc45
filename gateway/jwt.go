package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/httprc/v3/errsink"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/sluicehq/sluice/internal/names"
)

// JWT limits.
const (
	// MaxTokenBytes caps a JWT bearer token; a larger one is refused
	// before it is parsed.
	MaxTokenBytes = 8 << 10
	// MaxAttributeBytes caps an attribute value a token's claim gives, as
	// the catalog caps the values of a key (catalog.MaxValueBytes).
	MaxAttributeBytes = 256
	// JWTLeeway is the clock skew allowed on a token's exp, nbf and iat.
	JWTLeeway = 30 * time.Second
)

// JWTIssuer is an issuer whose signed tokens are trusted identity records.
type JWTIssuer struct {
	// Issuer is the tokens' iss, matched exactly.
	Issuer string
	// Audience lists the values a token's aud may hold; it must hold one.
	Audience []string
	// JWKSURL or JWKSFile (exactly one) holds the issuer's public keys.
	JWKSURL  string
	JWKSFile string
	// Org, when set, is the org of every token of the issuer; the org claim
	// is then not read.
	Org string
	// Claims names the claims that give the attributes.
	Claims JWTClaims
}

// JWTClaims names the claim that gives each attribute. An empty name
// means the default: org, workspace, sub (for User), team, tier.
type JWTClaims struct {
	Org, Workspace, User, Team, Tier string
	// Class names the claim that gives the priority class (Principal.Class,
	// which replaces the tier's). It has no default: empty reads none.
	Class string
}

// JWTOptions configures a JWTAuthenticator. Issuers and Next are required.
type JWTOptions struct {
	Issuers []JWTIssuer
	// Next authenticates the bearers that are not shaped like a JWT: the
	// API keys.
	Next Authenticator
	// Tiers are the tier names a token's tier claim may give; a token
	// naming another tier is refused.
	Tiers []string
	// HTTPClient fetches JWKS URLs; nil is a client with a 30 s timeout.
	// Either way redirects are followed only within the URL's origin and
	// a body is read up to 1 MiB.
	HTTPClient *http.Client
	// MinRefresh is how often at most a token naming a key its issuer's
	// cached JWKS lacks makes the JWKS be read anew (10 s).
	MinRefresh time.Duration
	// FetchTimeout bounds a JWKS fetch on a request's path (5 s).
	FetchTimeout time.Duration
	// Now is the clock tokens are checked against; nil is time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// JWTAuthenticator accepts JWT bearer tokens from configured issuers as
// trusted identity records, and hands every other bearer to the API-key
// Authenticator it wraps. Tokens must be signed with an asymmetric
// algorithm (RS*, PS*, ES256/384/512, EdDSA) by a key of the issuer's JWKS
// named by the token's kid, carry an exp, and be within their exp, nbf
// and iat (JWTLeeway allowed). It is safe for concurrent use.
type JWTAuthenticator struct {
	next    Authenticator
	issuers map[string]*jwtIssuer
	tiers   []string
	timeout time.Duration
	now     func() time.Time
}

type jwtIssuer struct {
	JWTIssuer
	keys *issuerKeys
}

var _ CachedAuthenticator = (*JWTAuthenticator)(nil)

// acceptedAlgs are the signature algorithms a token may use: asymmetric
// only, so that a public key can never serve as an HMAC secret, and never
// none.
var acceptedAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// NewJWTAuthenticator reads the JWKS files and starts fetching the JWKS
// URLs; their cache runs until ctx is done. An unreadable file is an
// error; a URL that does not answer is not (its tokens are answered as
// the key store being unavailable until it does, and the failure is
// logged).
func NewJWTAuthenticator(ctx context.Context, opts JWTOptions) (*JWTAuthenticator, error) {
	if opts.Next == nil || len(opts.Issuers) == 0 {
		return nil, errors.New("gateway: jwt: Issuers and Next are required")
	}
	if opts.MinRefresh <= 0 {
		opts.MinRefresh = 10 * time.Second
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &JWTAuthenticator{next: opts.Next, issuers: map[string]*jwtIssuer{}, tiers: opts.Tiers, timeout: opts.FetchTimeout, now: opts.Now}
	var cache *jwk.Cache
	for _, iss := range opts.Issuers {
		if iss.Issuer == "" || len(iss.Audience) == 0 || (iss.JWKSURL == "") == (iss.JWKSFile == "") {
			return nil, fmt.Errorf("gateway: jwt issuer %q: needs an issuer, an audience, and one of a JWKS URL and file", iss.Issuer)
		}
		if _, dup := a.issuers[iss.Issuer]; dup {
			return nil, fmt.Errorf("gateway: jwt issuer %q is listed twice", iss.Issuer)
		}
		iss.Claims = iss.Claims.withDefaults()
		var src keySource
		if iss.JWKSFile != "" {
			f, err := newFileKeys(iss.JWKSFile)
			if err != nil {
				return nil, fmt.Errorf("gateway: jwt issuer %q: %w", iss.Issuer, err)
			}
			src = f
		} else {
			if cache == nil {
				var err error
				client := httprc.NewClient(httprc.WithErrorSink(errsink.NewSlog(log)))
				if cache, err = jwk.NewCache(ctx, client); err != nil {
					return nil, fmt.Errorf("gateway: jwt: %w", err)
				}
			}
			reg := []jwk.RegisterOption{jwk.WithWaitReady(false), jwk.WithMinInterval(time.Minute), jwk.WithMaxInterval(time.Hour),
				jwk.WithHTTPClient(newJWKSClient(opts.HTTPClient))}
			if err := cache.Register(ctx, iss.JWKSURL, reg...); err != nil {
				return nil, fmt.Errorf("gateway: jwt issuer %q: %w", iss.Issuer, err)
			}
			wait, cancel := context.WithTimeout(ctx, opts.FetchTimeout)
			ready := cache.Ready(wait, iss.JWKSURL)
			cancel()
			if !ready {
				log.Warn("jwt issuer's JWKS is not reachable yet: its tokens are answered 503 until it is",
					"issuer", iss.Issuer, "jwks_url", iss.JWKSURL)
			}
			src = &urlKeys{cache: cache, url: iss.JWKSURL}
		}
		a.issuers[iss.Issuer] = &jwtIssuer{JWTIssuer: iss, keys: &issuerKeys{src: src, minRefresh: opts.MinRefresh, log: log.With("issuer", iss.Issuer)}}
	}
	return a, nil
}

func (c JWTClaims) withDefaults() JWTClaims {
	for _, d := range []struct {
		field *string
		claim string
	}{{&c.Org, "org"}, {&c.Workspace, "workspace"}, {&c.User, "sub"}, {&c.Team, "team"}, {&c.Tier, "tier"}} {
		if *d.field == "" {
			*d.field = d.claim
		}
	}
	return c
}

// Authenticate verifies a bearer shaped like a JWT and returns the
// principal its claims give; any other bearer goes to the wrapped
// Authenticator. A refused token is an error that errors.Is ErrBadKey,
// whose reason the gateway sends with its 401; keys that cannot be had
// (a JWKS that never answered) are any other error, the gateway's 503.
func (a *JWTAuthenticator) Authenticate(ctx context.Context, secret string) (Principal, error) {
	if !jwtShaped(secret) {
		return a.next.Authenticate(ctx, secret)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	return a.verify(ctx, secret, a.now())
}

// AuthenticateCached answers a bearer that is not shaped like a JWT from
// the wrapped Authenticator's memory, when it is a CachedAuthenticator
// that can. A JWT is left to Authenticate: verifying it may fetch the
// issuer's keys.
func (a *JWTAuthenticator) AuthenticateCached(secret string) (Principal, bool, error) {
	if next, ok := a.next.(CachedAuthenticator); ok && !jwtShaped(secret) {
		return next.AuthenticateCached(secret)
	}
	return Principal{}, false, nil
}

// jwtShaped reports whether s has the shape of a JWS in compact form:
// three base64url parts separated by dots, the first two not empty (the
// third is empty for alg none, which is then refused by name). An API key
// has no dot.
func jwtShaped(s string) bool {
	dots, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			if i == start && dots < 2 {
				return false
			}
			dots++
			start = i + 1
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return dots == 2
}

// verify checks token at now and returns its principal.
func (a *JWTAuthenticator) verify(ctx context.Context, token string, now time.Time) (Principal, error) {
	if len(token) > MaxTokenBytes {
		return Principal{}, badToken(fmt.Sprintf("it is larger than %d bytes", MaxTokenBytes))
	}
	msg, err := jws.ParseString(token, jws.WithCompact())
	if err != nil || len(msg.Signatures()) != 1 {
		return Principal{}, badTokenErr("it is not a well-formed JWT", err)
	}
	hdr := msg.Signatures()[0].ProtectedHeaders()
	alg, _ := hdr.Algorithm()
	if !slices.Contains(acceptedAlgs, alg.String()) {
		return Principal{}, badToken(fmt.Sprintf("its alg %q is not accepted (use RS*, PS*, ES256/384/512 or EdDSA)", alg.String()))
	}
	unverified, err := jwt.ParseInsecure([]byte(token))
	if err != nil {
		return Principal{}, badTokenErr("its claims are not well-formed", err)
	}
	issName, ok := unverified.Issuer()
	if !ok || issName == "" {
		return Principal{}, badToken("it has no iss claim")
	}
	iss, ok := a.issuers[issName]
	if !ok {
		return Principal{}, badToken(fmt.Sprintf("its issuer %q is not trusted by this gateway", issName))
	}
	kid, ok := hdr.KeyID()
	if !ok || kid == "" {
		return Principal{}, badToken("it has no kid header naming its key")
	}
	key, err := iss.keys.key(ctx, kid, now)
	if err != nil {
		return Principal{}, err
	}
	if keyAlg, ok := key.Algorithm(); ok && keyAlg.String() != alg.String() {
		return Principal{}, badToken(fmt.Sprintf("its alg %s is not the alg of its key %q (%s)", alg, kid, keyAlg))
	}
	tok, err := jwt.Parse([]byte(token), jwt.WithKey(alg, key), jwt.WithValidate(false))
	if err != nil {
		return Principal{}, badTokenErr("its signature does not verify", err)
	}
	err = jwt.Validate(tok, jwt.WithClock(jwt.ClockFunc(func() time.Time { return now })), jwt.WithAcceptableSkew(JWTLeeway),
		jwt.WithRequiredClaim("exp"))
	switch {
	case errors.Is(err, jwt.TokenExpiredError()):
		return Principal{}, badTokenErr("it has expired", err)
	case errors.Is(err, jwt.TokenNotYetValidError()):
		return Principal{}, badTokenErr("it is not valid yet (nbf)", err)
	case errors.Is(err, jwt.InvalidIssuedAtError()):
		return Principal{}, badTokenErr("it was issued in the future (iat)", err)
	case errors.Is(err, jwt.MissingRequiredClaimError()):
		return Principal{}, badTokenErr("it has no exp claim: tokens must expire", err)
	case err != nil:
		return Principal{}, badTokenErr("it is not valid", err)
	}
	aud, _ := tok.Audience()
	if !slices.ContainsFunc(aud, func(s string) bool { return slices.Contains(iss.Audience, s) }) {
		return Principal{}, badToken(fmt.Sprintf("its audience (aud) is not %s", strings.Join(quoteAll(iss.Audience), " or ")))
	}
	return iss.principal(tok, a.tiers)
}

// principal maps the claims of a verified token to a principal.
func (iss *jwtIssuer) principal(tok jwt.Token, tiers []string) (Principal, error) {
	sub, ok := tok.Subject()
	if !ok || sub == "" {
		return Principal{}, badToken(`it has no "sub" claim`)
	}
	p := Principal{KeyID: jwtKeyID(iss.Issuer, sub), Org: iss.Org}
	cl := iss.Claims
	for _, f := range []struct {
		attr, claim string
		dst         *string
		required    bool
	}{
		{"org", cl.Org, &p.Org, iss.Org == ""},
		{"workspace", cl.Workspace, &p.Workspace, true},
		{"user", cl.User, &p.User, true},
		{"team", cl.Team, &p.Team, false},
		{"tier", cl.Tier, &p.Tier, false},
		{"class", cl.Class, &p.Class, false},
	} {
		if f.attr == "org" && iss.Org != "" || f.claim == "" {
			continue
		}
		v, err := claimString(tok, f.claim, f.attr)
		if err != nil {
			return Principal{}, err
		}
		if v == "" && f.required {
			hint := ""
			if f.attr == "org" {
				hint = " (or set the issuer's org)"
			}
			return Principal{}, badToken(fmt.Sprintf("it has no %q claim, which gives the %s%s", f.claim, f.attr, hint))
		}
		*f.dst = v
	}
	if p.Tier != "" && !slices.Contains(tiers, p.Tier) {
		return Principal{}, badToken(fmt.Sprintf("its tier %q is not a tier of this gateway", p.Tier))
	}
	if p.Class != "" {
		if err := names.Check(p.Class); err != nil {
			return Principal{}, badToken(fmt.Sprintf("its %q claim, which gives the class, %v", cl.Class, err))
		}
	}
	return p, nil
}

// claimString returns the string claim name ("" when absent).
func claimString(tok jwt.Token, name, attr string) (string, error) {
	if !tok.Has(name) {
		return "", nil
	}
	var v any
	if err := tok.Get(name, &v); err != nil {
		return "", badTokenErr(fmt.Sprintf("its %q claim cannot be read", name), err)
	}
	s, ok := v.(string)
	if !ok {
		return "", badToken(fmt.Sprintf("its %q claim, which gives the %s, is not a string", name, attr))
	}
	if !validAttribute(s, MaxAttributeBytes) {
		return "", badToken(fmt.Sprintf("its %q claim, which gives the %s, is longer than %d bytes or holds control characters", name, attr, MaxAttributeBytes))
	}
	return s, nil
}

// jwtKeyID is the key of a token's principal: stable for its subject at
// its issuer, globally unique, and no part of the token.
func jwtKeyID(issuer, sub string) string {
	h := sha256.Sum256([]byte(issuer + "\x00" + sub))
	return "jwt:" + hex.EncodeToString(h[:12])
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// tokenError is a refused bearer token: the gateway answers it 401 with
// its reason. It is ErrBadKey to errors.Is.
type tokenError struct {
	reason string
	err    error
}

func badToken(reason string) error { return &tokenError{reason: reason} }

func badTokenErr(reason string, err error) error { return &tokenError{reason: reason, err: err} }

func (e *tokenError) Error() string {
	if e.err != nil {
		return "gateway: bearer token refused: " + e.reason + ": " + e.err.Error()
	}
	return "gateway: bearer token refused: " + e.reason
}

func (e *tokenError) Is(target error) bool { return target == ErrBadKey }

func (e *tokenError) Unwrap() error { return e.err }
