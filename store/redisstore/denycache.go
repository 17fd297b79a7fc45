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
// writes b's results: the cached charges refused, the others marked
// allowed (they were not evaluated).
func (d *denyCache) refuse(b *sluice.Batch, results []sluice.ChargeResult, keys []string, now time.Time) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if len(d.entries) == 0 {
		return false
	}
	hit := false
	for i := range b.Charges {
		if e, ok := d.match(&b.Charges[i], keys[i], now); ok {
			if !hit {
				for j := range results {
					results[j] = sluice.ChargeResult{Allowed: true}
				}
				hit = true
			}
			r := &results[i]
			r.Allowed, r.Used, r.Remaining, r.ResetAt = false, e.used, e.remaining, e.resetAt
			if b.Charges[i].Kind == sluice.KindRate {
				r.RetryAfter = e.until.Sub(now)
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
func (d *denyCache) remember(b *sluice.Batch, results []sluice.ChargeResult, keys []string, now, serverNow time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range b.Charges {
		c, r := &b.Charges[i], &results[i]
		if r.Allowed || c.Shadow {
			continue
		}
		var ttl time.Duration
		switch c.Kind {
		case sluice.KindRate:
			ttl = r.RetryAfter
		case sluice.KindBudget:
			ttl = min(r.ResetAt.Sub(serverNow), d.maxAge)
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
			used: r.Used, remaining: r.Remaining, resetAt: r.ResetAt}
	}
}
