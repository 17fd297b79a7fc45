package gateway

import (
	"context"
	"fmt"
	"log/slog"
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
