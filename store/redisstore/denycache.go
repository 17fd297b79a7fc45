package redisstore

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// denyCache remembers keys refused until a known time, so that charges of
// those keys at least as large are refused without a round trip.
type denyCache struct {
	mu      sync.RWMutex
	entries map[string]denyEntry
	maxAge  time.Duration
	size    int
}

type denyEntry struct {
	until                time.Time
	amount, limit, burst int64
	used, remaining      int64
	resetAt              time.Time
}

func newDenyCache(maxAge time.Duration, size int) *denyCache {
	if maxAge <= 0 {
		maxAge = 10 * time.Second
	}
	if size <= 0 {
		size = 1 << 16
	}
	return &denyCache{entries: map[string]denyEntry{}, maxAge: maxAge, size: size}
}

// refuse reports whether a charge of b is refused by a live entry, and then
// fills b's results: the cached charges refused, the others marked allowed
// (they were not evaluated).
func (d *denyCache) refuse(b *sluice.Batch, keys []string, now time.Time) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if len(d.entries) == 0 {
		return false
	}
	hit := false
	for i := range b.Charges {
		if e, ok := d.match(&b.Charges[i], keys[i], now); ok {
			if !hit {
				for j := range b.Charges {
					b.Charges[j].Allowed, b.Charges[j].RetryAfter = true, 0
				}
				hit = true
			}
			c := &b.Charges[i]
			c.Allowed, c.Used, c.Remaining, c.ResetAt = false, e.used, e.remaining, e.resetAt
			if c.Kind == sluice.KindRate {
				c.RetryAfter = e.until.Sub(now)
			}
		}
	}
	return hit
}

func (d *denyCache) match(c *sluice.Charge, key string, now time.Time) (denyEntry, bool) {
	if c.Shadow {
		return denyEntry{}, false
	}
	e, ok := d.entries[key]
	if !ok || !now.Before(e.until) || c.Amount < e.amount || c.Limit != e.limit || c.BurstOrLimit() != e.burst {
		return denyEntry{}, false
	}
	return e, true
}

// remember caches the refused charges of a batch refused at serverNow (the
// script's clock) and now (the local clock).
func (d *denyCache) remember(b *sluice.Batch, keys []string, now, serverNow time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range b.Charges {
		c := &b.Charges[i]
		if c.Allowed || c.Shadow {
			continue
		}
		var ttl time.Duration
		switch c.Kind {
		case sluice.KindRate:
			ttl = c.RetryAfter
		case sluice.KindBudget:
			ttl = min(c.ResetAt.Sub(serverNow), d.maxAge)
		}
		if ttl <= 0 || ttl >= 1<<62 {
			continue
		}
		if len(d.entries) >= d.size {
			for k, e := range d.entries {
				if !now.Before(e.until) {
					delete(d.entries, k)
				}
			}
			if len(d.entries) >= d.size {
				continue
			}
		}
		d.entries[keys[i]] = denyEntry{until: now.Add(ttl), amount: c.Amount, limit: c.Limit, burst: c.BurstOrLimit(),
			used: c.Used, remaining: c.Remaining, resetAt: c.ResetAt}
	}
}
