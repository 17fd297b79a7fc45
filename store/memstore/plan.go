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
	// slot is the charge's counter in its subject's slots, -1 if none.
	slot int
	// slots is, for the first charge on each subject, that subject's
	// slots.
	slots []slot
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
		j := s.shardOf(charges[i].Subject)
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
// missing ones when create is set. Slots are added before any is used, so
// the addresses counter returns stay good until the shards are unlocked.
func (s *Store) resolve(p *plan, charges []inproc.Charge, create bool) {
	for i := range charges {
		pc := p.at(i)
		sh := &s.shards[pc.shard]
		if pc.first == i {
			pc.slots = sh.subjects[charges[i].Subject]
		}
		owner := p.at(pc.first)
		ch := &charges[i]
		k := findSlot(owner.slots, ch.Rule, ch.Period)
		if k < 0 && create {
			owner.slots = append(owner.slots, slot{rule: ch.Rule, period: ch.Period})
			sh.subjects[ch.Subject] = owner.slots
			k = len(owner.slots) - 1
		}
		pc.slot = k
	}
}

// counter returns the counter of charge i of a resolved plan, nil if it has
// none.
func (p *plan) counter(i int) *counter {
	pc := p.at(i)
	if pc.slot < 0 {
		return nil
	}
	return &p.at(pc.first).slots[pc.slot].counter
}

func findSlot(slots []slot, rule uint64, period int64) int {
	for k := range slots {
		if slots[k].rule == rule && slots[k].period == period {
			return k
		}
	}
	return -1
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
