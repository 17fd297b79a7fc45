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
type keyCache struct {
	ttl  time.Duration // <= 0: disabled
	size int

	mu      sync.RWMutex
	gen     uint64
	entries map[string]*cacheEntry
}

type cacheEntry struct {
	hash  [sha256.Size]byte
	key   Key
	until time.Time
}

func newKeyCache(ttl time.Duration, size int) *keyCache {
	return &keyCache{ttl: ttl, size: size, entries: map[string]*cacheEntry{}}
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
