package gateway

import (
	"context"
	"time"
)

// CacheLocker is a CacheStore shared by several replicas that can hold a
// short lock per key, so that identical misses on different replicas make
// one upstream call: the replica that takes the lock calls the provider,
// the others wait for the answer it keeps.
type CacheLocker interface {
	// Lock takes key's lock for ttl unless it is held; unlock gives back
	// a lock taken (and only while it is still the caller's).
	Lock(ctx context.Context, key string, ttl time.Duration) (unlock func(), taken bool, err error)
}

// cacheLockTTL bounds how long a replica's lock keeps the others waiting:
// past it, another replica calls the provider too.
const cacheLockTTL = 30 * time.Second

// cacheLockPoll is how often a replica waiting for another's answer looks
// for it.
const cacheLockPoll = 50 * time.Millisecond

// awaitReplica is, for the call leading its replica's flight, the answer
// another replica is about to keep: while another replica holds the key's
// lock, the call waits for its answer (until its own deadline). nil: no
// answer came, and the call leads, holding the lock when it took it.
func (c *call) awaitReplica() *cachedAnswer {
	l, ok := c.g.opts.Cache.(CacheLocker)
	if !ok {
		return nil
	}
	for waited := false; ; waited = true {
		ctx, cancel := context.WithTimeout(context.Background(), cacheStoreTimeout)
		unlock, taken, err := l.Lock(ctx, c.cache.key, cacheLockTTL)
		cancel()
		if err != nil {
			c.g.log.Warn("response cache lock failed; calling the provider", "request_id", c.event.RequestID, "err", err)
			return nil
		}
		if taken {
			c.cache.unlock = unlock
			if waited {
				// The replica that held the lock may have kept its answer
				// and let go of the lock since this call last looked.
				return c.lookup()
			}
			return nil
		}
		if !c.g.now().Add(cacheLockPoll).Before(c.deadline) {
			return nil
		}
		c.g.sleep(cacheLockPoll, nil)
		if e := c.lookup(); e != nil {
			return e
		}
	}
}
