package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
)

// keySource holds an issuer's public keys (its JWKS).
type keySource interface {
	// keys returns the keys held; an error when none could be had yet.
	keys(ctx context.Context) (jwk.Set, error)
	// refresh reads the keys anew; on an error the keys held are kept.
	refresh(ctx context.Context) (jwk.Set, error)
}

// urlKeys is a JWKS served over HTTP, kept by jwx's jwk.Cache: fetched at
// start, refreshed in the background as the server's Cache-Control says
// (within the cache's bounds), and on demand.
type urlKeys struct {
	cache *jwk.Cache
	url   string
}

func (u *urlKeys) keys(ctx context.Context) (jwk.Set, error) {
	set, err := u.cache.Lookup(ctx, u.url)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", u.url, err)
	}
	return set, nil
}

func (u *urlKeys) refresh(ctx context.Context) (jwk.Set, error) {
	set, err := u.cache.Refresh(ctx, u.url)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", u.url, err)
	}
	return set, nil
}

// fileKeys is a JWKS in a file, read at start and again on demand (a
// rotation rewrites the file).
type fileKeys struct {
	path string
	mu   sync.Mutex
	set  jwk.Set
}

func newFileKeys(path string) (*fileKeys, error) {
	f := &fileKeys{path: path}
	if _, err := f.refresh(context.Background()); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *fileKeys) keys(context.Context) (jwk.Set, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.set, nil
}

func (f *fileKeys) refresh(context.Context) (jwk.Set, error) {
	set, err := jwk.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("jwks file %s: %w", f.path, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = set
	return set, nil
}

// issuerKeys finds the key a token names in its issuer's JWKS. A key it
// does not hold makes it read the JWKS anew, at most once per
// minRefresh: a rotated key works at once, and tokens naming made-up keys
// cannot make it hammer the issuer.
type issuerKeys struct {
	src        keySource
	minRefresh time.Duration
	// log is told of each failed refresh (at most one per minRefresh).
	log *slog.Logger

	mu sync.Mutex // serializes refreshes; guards the fields below
	// lastRefresh is when the last refresh on demand started, lastErr its
	// failure.
	lastRefresh time.Time
	lastErr     error
}

// keysUnavailableError wraps the failure to get an issuer's keys: not the
// token's fault, so it is answered as the key store being unavailable.
type keysUnavailableError struct{ err error }

func (e *keysUnavailableError) Error() string {
	return "gateway: jwt keys unavailable: " + e.err.Error()
}
func (e *keysUnavailableError) Unwrap() error { return e.err }

// key returns the key whose kid is kid. A *tokenError says the issuer has
// no such key; an *keysUnavailableError that its keys cannot be had (never
// fetched, or the refresh that would have shown the key failed).
func (k *issuerKeys) key(ctx context.Context, kid string, now time.Time) (jwk.Key, error) {
	if set, err := k.src.keys(ctx); err == nil {
		if key, ok := set.LookupKeyID(kid); ok {
			return key, nil
		}
	}
	set, err := k.refreshed(ctx, now)
	if err != nil {
		return nil, &keysUnavailableError{err}
	}
	if key, ok := set.LookupKeyID(kid); ok {
		return key, nil
	}
	return nil, badToken(fmt.Sprintf("its key %q is not one of its issuer's keys", kid))
}

// refreshed reads the keys anew unless that was done less than minRefresh
// ago; then it returns the keys held, or the error of that refresh.
func (k *issuerKeys) refreshed(ctx context.Context, now time.Time) (jwk.Set, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.lastRefresh.IsZero() && now.Sub(k.lastRefresh) < k.minRefresh && !now.Before(k.lastRefresh) {
		if k.lastErr != nil {
			return nil, k.lastErr
		}
		return k.src.keys(ctx)
	}
	k.lastRefresh = now
	set, err := k.src.refresh(ctx)
	k.lastErr = err
	if err != nil {
		k.log.Warn("jwt: reading the issuer's keys failed: its tokens naming keys not held are answered 503", "err", err)
	}
	return set, err
}

// maxJWKSBytes caps a JWKS body: a set of a few dozen keys is tens of kB,
// and a 7 MB one once kept 400 MB of heap.
const maxJWKSBytes = 1 << 20

// jwksClient fetches JWKS URLs: redirects are followed only within the
// URL's origin (a JWKS that sends the fetch elsewhere is refused, not
// trusted), and a body past maxJWKSBytes is an error.
type jwksClient struct{ c *http.Client }

// newJWKSClient returns a jwksClient over a copy of base (nil: a client
// with a 30 s timeout).
func newJWKSClient(base *http.Client) jwksClient {
	c := &http.Client{Timeout: 30 * time.Second}
	if base != nil {
		copied := *base
		c = &copied
	}
	next := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if from := via[0].URL; req.URL.Scheme != from.Scheme || req.URL.Host != from.Host {
			return fmt.Errorf("jwks %s redirected to another origin, %s://%s: refused", from, req.URL.Scheme, req.URL.Host)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return fmt.Errorf("jwks %s: stopped after 10 redirects", via[0].URL)
		}
		return nil
	}
	return jwksClient{c}
}

func (j jwksClient) Do(req *http.Request) (*http.Response, error) {
	resp, err := j.c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body = http.MaxBytesReader(nil, resp.Body, maxJWKSBytes)
	return resp, nil
}
