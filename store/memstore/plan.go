package memstore

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/inproc"
)

// inlineCharges is how many charges of one call are planned on the stack;
// a larger call allocates its plan.
const inlineCharges = 8

// maxLockSet is how many distinct shards a call locks one by one; a call on
// more locks every shard.
const maxLockSet = 8

// plan is where one call's charges live, and the shards to lock, in
// ascending order so that two calls never deadlock. Each subject is hashed
// and looked up once per call.
type plan struct {
	charges [inlineCharges]planned
	more    []planned // charges past inlineCharges

	idx [maxLockSet]int
	n   int
	all bool
}

// planned is one charge of a plan.
type planned struct {
	// shard holds the charge's subject; first is the first charge on the
	// same subject, whose map entry it shares.
	shard, first int
	// c is the charge's counter, nil if none.
	c *counter
	// last is, for the first charge on each subject, the slot last found
	// for a charge on it: the next charge most likely has the next slot.
	last uint32
	// key is, for the first charge on each subject, the subject's key,
	// and head the first of its slots.
	key  subjectKey
	head uint32
}

func (p *plan) at(i int) *planned {
	if i < inlineCharges {
		return &p.charges[i]
	}
	return &p.more[i-inlineCharges]
}

// plan hashes each distinct subject of charges once and works out the
// shards to lock.
func (s *Store) plan(p *plan, charges []inproc.Charge) {
	if n := len(charges); n > inlineCharges {
		p.more = make([]planned, n-inlineCharges)
	}
	for i := range charges {
		pc := p.at(i)
		pc.first = i
		for j := range i {
			if p.at(j).first == j && charges[j].Subject == charges[i].Subject {
				pc.first = j
				break
			}
		}
		if pc.first != i {
			pc.shard = p.at(pc.first).shard
			continue
		}
		pc.key = s.hash.key(charges[i].Subject)
		j := s.shardOf(pc.key)
		pc.shard = j
		if p.all {
			continue
		}
		pos := 0
		for pos < p.n && p.idx[pos] < j {
			pos++
		}
		if pos < p.n && p.idx[pos] == j {
			continue
		}
		if p.n == maxLockSet {
			p.all = true
			continue
		}
		copy(p.idx[pos+1:p.n+1], p.idx[pos:p.n])
		p.idx[pos] = j
		p.n++
	}
}

func (s *Store) lock(p *plan) {
	if p.all {
		for j := range s.shards {
			s.shards[j].mu.Lock()
		}
		return
	}
	for _, j := range p.idx[:p.n] {
		s.shards[j].mu.Lock()
	}
}

func (s *Store) unlock(p *plan) {
	if p.all {
		for j := range s.shards {
			s.shards[j].mu.Unlock()
		}
		return
	}
	for _, j := range p.idx[:p.n] {
		s.shards[j].mu.Unlock()
	}
}

// resolve finds the slot of every charge of a locked plan, adding the
// missing ones when create is set. A slot does not move, so the addresses
// counter returns stay good until the shards are unlocked.
func (s *Store) resolve(p *plan, charges []inproc.Charge, create bool) {
	for i := range charges {
		pc := p.at(i)
		sh := &s.shards[pc.shard].shard
		if pc.first == i {
			pc.head = sh.subjects.get(pc.key)
			pc.last = noSlot
		}
		owner := p.at(pc.first)
		ch := &charges[i]
		k := noSlot
		if owner.last != noSlot {
			if next := sh.at(owner.last).next; next != noSlot {
				if sl := sh.at(next); sl.rule == ch.Rule && sl.period == ch.Period {
					k = next
				}
			}
		}
		if k == noSlot {
			var last uint32
			k, last = sh.find(owner.head, ch.Rule, ch.Period)
			if k == noSlot && create {
				k = sh.add(owner.key, last, ch.Rule, ch.Period)
				if last == noSlot {
					owner.head = k
				}
			}
		}
		pc.c = nil
		if k != noSlot {
			pc.c = &sh.at(k).counter
			owner.last = k
		}
	}
}

// counter returns the counter of charge i of a resolved plan, nil if it has
// none, and its shard.
func (s *Store) counter(p *plan, i int) (*counter, *shard) {
	pc := p.at(i)
	return pc.c, &s.shards[pc.shard].shard
}

// fromBatch appends b's charges to buf in the engine's in-process form.
func fromBatch(b *sluice.Batch, buf []inproc.Charge) []inproc.Charge {
	for i := range b.Charges {
		c := &b.Charges[i]
		buf = append(buf, inproc.Charge{
			Subject: c.Key.Subject, Rule: c.Key.Rule, Period: c.Key.Period,
			Window: int64(c.Window), Limit: c.Limit, Burst: c.Burst,
			Amount: c.Amount, Actual: c.Actual, PeriodEnd: unixNano(c.PeriodEnd),
			Kind: kindOf(c.Kind), Shadow: c.Shadow, Release: c.OnExpiry == sluice.ExpiryRelease,
		})
	}
	return buf
}

// toBatch copies the results of charges to b's charges.
func toBatch(charges []inproc.Charge, b *sluice.Batch) {
	for i := range charges {
		ch, c := &charges[i], &b.Charges[i]
		c.Allowed, c.Remaining, c.Used, c.RetryAfter = ch.Allowed, ch.Remaining, ch.Used, time.Duration(ch.RetryAfter)
		switch {
		case ch.Kind == inproc.Budget:
			c.ResetAt = c.PeriodEnd
		case ch.ResetAt != 0:
			c.ResetAt = time.Unix(0, ch.ResetAt)
		}
	}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func kindOf(k sluice.Kind) inproc.Kind {
	switch k {
	case sluice.KindRate:
		return inproc.Rate
	case sluice.KindBudget:
		return inproc.Budget
	case sluice.KindConcurrency:
		return inproc.Concurrency
	}
	return 0
}

func kindName(k inproc.Kind) sluice.Kind {
	switch k {
	case inproc.Rate:
		return sluice.KindRate
	case inproc.Budget:
		return sluice.KindBudget
	case inproc.Concurrency:
		return sluice.KindConcurrency
	}
	return ""
}
