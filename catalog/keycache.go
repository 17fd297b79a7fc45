package catalog

import (
	"crypto/sha256"
	"crypto/subtle"
	"sync"
	"time"
)

// keyCache remembers successful key lookups for a short TTL, so that
// Authenticate on a key in steady use makes no database round trip. It
// stores the secret's hash, never the secret, and compares it in constant
// time on every hit.
//
// A revocation or rotation through this process calls invalidate, which
// drops the entry and bumps the generation: a lookup that read the
// database before the change committed then cannot put its stale answer
// back, because put refuses answers read under an older generation.
//
// It also remembers, as long and as many, the secrets the database refused
// (no such key, a wrong secret for one, a revoked key): a client that sends
// the same bad secret again is refused without a query. Nothing makes such
// a secret good later: ids and secrets are random, and a revocation is for
// good.
type keyCache struct {
	ttl  time.Duration // <= 0: disabled
	size int

	mu      sync.RWMutex
	gen     uint64
	entries map[string]*cacheEntry
	refused map[[sha256.Size]byte]refusal
}

// refusal is the database's answer to a secret it refused, and until when
// it is remembered.
type refusal struct {
	err   error
	until time.Time
}

type cacheEntry struct {
	hash  [sha256.Size]byte
	key   Key
	until time.Time
}

func newKeyCache(ttl time.Duration, size int) *keyCache {
	return &keyCache{ttl: ttl, size: size, entries: map[string]*cacheEntry{}, refused: map[[sha256.Size]byte]refusal{}}
}

// refusedAt returns the refusal the database gave the secret of hash, when
// it is remembered at now.
func (c *keyCache) refusedAt(hash *[sha256.Size]byte, now time.Time) (error, bool) {
	if c.ttl <= 0 {
		return nil, false
	}
	c.mu.RLock()
	r, ok := c.refused[*hash]
	c.mu.RUnlock()
	if !ok || !now.Before(r.until) {
		return nil, false
	}
	return r.err, true
}

// refuse remembers that the database refused the secret of hash with err.
func (c *keyCache) refuse(hash *[sha256.Size]byte, err error, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.refused) >= c.size {
		drop := c.size / 10
		for h, r := range c.refused {
			if !now.Before(r.until) || drop > 0 {
				delete(c.refused, h)
				drop--
			}
		}
	}
	c.refused[*hash] = refusal{err: err, until: now.Add(c.ttl)}
}

// get returns the cached key for id when its hash matches and the entry is
// fresh at now. A mismatch is a miss, not a refusal: the key may have been
// rotated by another process, so the database decides.
func (c *keyCache) get(id string, hash *[sha256.Size]byte, now time.Time) (Key, bool) {
	if c.ttl <= 0 {
		return Key{}, false
	}
	c.mu.RLock()
	e := c.entries[id]
	c.mu.RUnlock()
	if e == nil || !now.Before(e.until) || subtle.ConstantTimeCompare(e.hash[:], hash[:]) != 1 {
		return Key{}, false
	}
	return e.key, true
}

// generation is read before a database lookup and handed to put.
func (c *keyCache) generation() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// put caches a successful lookup made at now under generation gen.
func (c *keyCache) put(id string, hash *[sha256.Size]byte, k Key, now time.Time, gen uint64) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.entries[id]; !ok && len(c.entries) >= c.size {
		c.evict(now)
	}
	c.entries[id] = &cacheEntry{hash: *hash, key: k, until: now.Add(c.ttl)}
}

// evict makes room: it drops stale entries, then, if the cache is still
// full, an arbitrary tenth of it. Called with mu held.
func (c *keyCache) evict(now time.Time) {
	for id, e := range c.entries {
		if !now.Before(e.until) {
			delete(c.entries, id)
		}
	}
	drop := len(c.entries) - c.size + 1
	if drop <= 0 {
		return
	}
	drop = max(drop, c.size/10)
	for id := range c.entries {
		if drop == 0 {
			break
		}
		delete(c.entries, id)
		drop--
	}
}

// invalidate forgets id and refuses puts of lookups already in flight.
func (c *keyCache) invalidate(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.entries, id)
}
