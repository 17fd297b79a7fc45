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

// plan is where one call's charges live: the shard of each, the first
// charge on the same subject (whose map entry it shares), the slot of each
// in its subject's entry, and the shards to lock, in ascending order so
// that two calls never deadlock. Each subject is hashed and looked up once
// per call.
type plan struct {
	shard []int
	first []int
	slot  []int
	// subjects holds, at the index of the first charge on each subject,
	// that subject's slots.
	subjects [][]slot

	idx [maxLockSet]int
	n   int
	all bool

	inShard, inFirst, inSlot [inlineCharges]int
	inSubjects               [inlineCharges][]slot
}

// plan hashes each distinct subject of charges once and works out the
// shards to lock.
func (s *Store) plan(p *plan, charges []inproc.Charge) {
	n := len(charges)
	if n <= inlineCharges {
		p.shard, p.first, p.slot, p.subjects = p.inShard[:n], p.inFirst[:n], p.inSlot[:n], p.inSubjects[:n]
	} else {
		p.shard, p.first, p.slot, p.subjects = make([]int, n), make([]int, n), make([]int, n), make([][]slot, n)
	}
	for i := range charges {
		p.first[i] = i
		for j := range i {
			if p.first[j] == j && charges[j].Subject == charges[i].Subject {
				p.first[i] = j
				break
			}
		}
		if p.first[i] != i {
			p.shard[i] = p.shard[p.first[i]]
			continue
		}
		j := s.shardOf(charges[i].Subject)
		p.shard[i] = j
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
// missing ones when create is set (a missing slot is -1 otherwise). Slots
// are added before any is used, so the addresses counter returns stay
// good until the shards are unlocked.
func (s *Store) resolve(p *plan, charges []inproc.Charge, create bool) {
	for i := range charges {
		f := p.first[i]
		if f == i {
			p.subjects[i] = s.shards[p.shard[i]].subjects[charges[i].Subject]
		}
		ch := &charges[i]
		k := findSlot(p.subjects[f], ch.Rule, ch.Period)
		if k < 0 && create {
			p.subjects[f] = append(p.subjects[f], slot{rule: ch.Rule, period: ch.Period})
			s.shards[p.shard[i]].subjects[ch.Subject] = p.subjects[f]
			k = len(p.subjects[f]) - 1
		}
		p.slot[i] = k
	}
}

// counter returns the counter of charge i of a resolved plan, nil if it has
// none.
func (p *plan) counter(i int) *counter {
	k := p.slot[i]
	if k < 0 {
		return nil
	}
	return &p.subjects[p.first[i]][k].counter
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
