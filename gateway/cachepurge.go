package gateway

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
)

// CachePurger is a CacheStore that can drop entries: those whose keys
// match a pattern in which * stands for one part of a key. A key is three
// parts joined by '/' (the org, the model and the request, none holding a
// '/' or a '*'), so Redis's MATCH and path.Match read a pattern alike.
type CachePurger interface {
	Purge(ctx context.Context, match string) (purged int, err error)
}

// ErrCacheNotPurgeable is PurgeCache's error when the gateway has no
// response cache, or one whose store cannot purge.
var ErrCacheNotPurgeable = errors.New("gateway: the response cache cannot be purged")

// PurgeCache drops the response cache's entries of org, of model, or of
// org's calls to model (empty: any, but not both): in the store every
// replica shares, or in this process's memory (each replica purges its
// own). It returns how many entries it dropped.
func (g *Gateway) PurgeCache(ctx context.Context, org, model string) (int, error) {
	p, ok := g.opts.Cache.(CachePurger)
	if !ok {
		return 0, ErrCacheNotPurgeable
	}
	if org == "" && model == "" {
		return 0, errors.New("gateway: purge cache: name an org, a model or both")
	}
	n, err := p.Purge(ctx, cachePattern(org, model))
	if err != nil {
		return n, fmt.Errorf("gateway: purge cache: %w", err)
	}
	return n, nil
}

// cachePattern matches the keys of org's entries of model (empty: any).
func cachePattern(org, model string) string {
	part := func(v string) string {
		if v == "" {
			return "*"
		}
		return hex.EncodeToString([]byte(v))
	}
	return part(org) + "/" + part(model) + "/*"
}
