package memstore

import (
	"slices"

	"github.com/sluicehq/sluice/internal/inproc"
)

// A concurrency counter's leases are its inline lease, if c.inl, and the
// list at shard.leases[c.lease-1], if c.lease != 0. The list is never kept
// without the inline lease, nor kept empty: at most one live lease, the
// common case, reads and writes the counter's own slot alone. The order of
// the leases means nothing.

// addLease gives c the lease l: inline if c holds none there, else out of
// line.
func (sh *shard) addLease(c *counter, l lease) {
	if !c.inl {
		*c.inline() = l
		c.inl = true
		return
	}
	if c.lease == 0 {
		if n := len(sh.freeLeases); n > 0 {
			c.lease = sh.freeLeases[n-1] + 1
			sh.freeLeases = sh.freeLeases[:n-1]
		} else {
			sh.leases = append(sh.leases, nil)
			c.lease = uint32(len(sh.leases))
		}
	}
	ls := &sh.leases[c.lease-1]
	*ls = append(*ls, l)
}

// dropLease frees the lease of admission id.
func (sh *shard) dropLease(c *counter, id uint64) {
	if c.inl && c.inline().id == id {
		c.inl = false
	} else if c.lease != 0 {
		ls := &sh.leases[c.lease-1]
		for i := range *ls {
			if (*ls)[i].id == id {
				// By hand, and only when found: slices.DeleteFunc
				// costs a closure call per lease and a write
				// barrier per call.
				n := len(*ls) - 1
				copy((*ls)[i:], (*ls)[i+1:])
				*ls = (*ls)[:n]
				break
			}
		}
	}
	if c.lease != 0 {
		sh.tidyLeases(c)
	}
}

// dropExpired frees c's leases past their expiry.
func (sh *shard) dropExpired(c *counter, now int64) {
	if c.inl && c.inline().expiry <= now {
		c.inl = false
	}
	if c.lease == 0 {
		return
	}
	ls := &sh.leases[c.lease-1]
	for _, l := range *ls {
		if l.expiry <= now {
			*ls = slices.DeleteFunc(*ls, func(l lease) bool { return l.expiry <= now })
			break
		}
	}
	sh.tidyLeases(c)
}

// tidyLeases restores the rules of c's leases after some were dropped:
// a lease of the list moves inline if the inline one is gone, and an empty
// list is given back.
func (sh *shard) tidyLeases(c *counter) {
	ls := &sh.leases[c.lease-1]
	if n := len(*ls); !c.inl && n > 0 {
		*c.inline() = (*ls)[n-1]
		c.inl = true
		*ls = (*ls)[:n-1]
	}
	if len(*ls) == 0 {
		sh.dropLeases(c)
	}
}

// heldLeases returns how many leases c holds, expired or not, and the
// earliest expiry among them that is not zero, 0 if none.
func (sh *shard) heldLeases(c *counter) (held, earliest int64) {
	if c.inl {
		held, earliest = 1, c.inline().expiry
	}
	if c.lease != 0 {
		ls := sh.leases[c.lease-1]
		held += int64(len(ls))
		for _, l := range ls {
			if earliest == 0 || l.expiry < earliest {
				earliest = l.expiry
			}
		}
	}
	return held, earliest
}

// liveLeases returns how many of c's leases have not expired at now.
func (sh *shard) liveLeases(c *counter, now int64) int {
	n := 0
	if c.inl && c.inline().expiry > now {
		n++
	}
	if c.lease != 0 {
		for _, l := range sh.leases[c.lease-1] {
			if l.expiry > now {
				n++
			}
		}
	}
	return n
}

// checkConcurrency evaluates a lease request on c against the leases
// held, dropping expired ones.
func (sh *shard) checkConcurrency(c *counter, ch *inproc.Charge, now int64) {
	sh.dropExpired(c, now)
	held, earliest := sh.heldLeases(c)
	ch.Allowed = held < ch.Limit
	if ch.Allowed {
		held++
	}
	ch.Used = held
	ch.Remaining = max(0, ch.Limit-held)
	if earliest > 0 {
		ch.ResetAt = earliest
		if !ch.Allowed {
			ch.RetryAfter = earliest - now
		}
	}
}
