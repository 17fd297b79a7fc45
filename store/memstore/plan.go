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

// plan is where one call's charges live, and the shards to lock. Each
// subject is hashed and looked up once per call.
type plan struct {
	subjects     [inlineCharges]plannedSubject
	moreSubjects []plannedSubject // subjects past inlineCharges
	charges      [inlineCharges]plannedCharge
	moreCharges  []plannedCharge // charges past inlineCharges
	lockSet
}

// plannedSubject is one subject of a plan.
type plannedSubject struct {
	key   subjectKey
	shard int
	// head is the first of the subject's slots; last is the slot last
	// found for one of its charges: the next charge most likely has the
	// next slot.
	head, last uint32
}

// plannedCharge is one charge of a resolved plan: its slot, and the slot's
// counter, nil if none.
type plannedCharge struct {
	c    *counter
	slot uint32
}

func (p *plan) subject(i uint32) *plannedSubject {
	if i < inlineCharges {
		return &p.subjects[i]
	}
	return &p.moreSubjects[i-inlineCharges]
}

func (p *plan) charge(i int) *plannedCharge {
	if i < inlineCharges {
		return &p.charges[i]
	}
	return &p.moreCharges[i-inlineCharges]
}

// lockSet is the shards one call locks, in ascending order so that two
// calls never deadlock; all of them past maxLockSet.
type lockSet struct {
	idx [maxLockSet]int
	n   int
	all bool
}

// add puts shard j in the set.
func (ls *lockSet) add(j int) {
	if ls.all {
		return
	}
	pos := 0
	for pos < ls.n && ls.idx[pos] < j {
		pos++
	}
	if pos < ls.n && ls.idx[pos] == j {
		return
	}
	if ls.n == maxLockSet {
		ls.all = true
		return
	}
	copy(ls.idx[pos+1:ls.n+1], ls.idx[pos:ls.n])
	ls.idx[pos] = j
	ls.n++
}

// plan hashes each subject of a once and works out the shards to lock.
func (s *Store) plan(p *plan, a *inproc.Admission) {
	if n := len(a.Subjects); n > inlineCharges {
		p.moreSubjects = make([]plannedSubject, n-inlineCharges)
	}
	if n := len(a.Charges); n > inlineCharges {
		p.moreCharges = make([]plannedCharge, n-inlineCharges)
	}
	for i, subject := range a.Subjects {
		ps := p.subject(uint32(i))
		ps.key = s.hash.key(subject)
		ps.shard = s.shardOf(ps.key)
		p.add(ps.shard)
	}
}

func (s *Store) lock(ls *lockSet) {
	if ls.all {
		for j := range s.shards {
			s.shards[j].mu.Lock()
		}
		return
	}
	for _, j := range ls.idx[:ls.n] {
		s.shards[j].mu.Lock()
	}
}

func (s *Store) unlock(ls *lockSet) {
	if ls.all {
		for j := range s.shards {
			s.shards[j].mu.Unlock()
		}
		return
	}
	for _, j := range ls.idx[:ls.n] {
		s.shards[j].mu.Unlock()
	}
}

// resolve finds the slot of every charge of a locked plan, adding the
// missing ones when create is set. A slot does not move, so the addresses
// counter returns stay good until the shards are unlocked.
func (s *Store) resolve(p *plan, a *inproc.Admission, create bool) {
	for i := range a.Subjects {
		ps := p.subject(uint32(i))
		ps.head = s.shards[ps.shard].subjects.get(ps.key)
		ps.last = noSlot
	}
	for i := range a.Charges {
		ch := &a.Charges[i]
		ps := p.subject(ch.Subject)
		sh := &s.shards[ps.shard].shard
		k := noSlot
		if ps.last != noSlot {
			if next := sh.at(ps.last).next; next != noSlot {
				if sl := sh.at(next); sl.rule == ch.Rule && sl.period == ch.Period {
					k = next
				}
			}
		}
		if k == noSlot {
			var last uint32
			k, last = sh.find(ps.head, ch.Rule, ch.Period)
			if k == noSlot && create {
				k = sh.add(ps.key, last, ch.Rule, ch.Period)
				if last == noSlot {
					ps.head = k
				}
			}
		}
		pc := p.charge(i)
		pc.c, pc.slot = nil, k
		if k != noSlot {
			pc.c = &sh.at(k).counter
			ps.last = k
		}
	}
}

// counter returns the counter of charge i of a resolved plan, nil if it has
// none, and its shard.
func (s *Store) counter(p *plan, a *inproc.Admission, i int) (*counter, *shard) {
	return p.charge(i).c, &s.shards[p.subject(a.Charges[i].Subject).shard].shard
}

// batchBuf holds on the stack the admission of a typical Batch.
type batchBuf struct {
	charges  [inlineCharges]inproc.Charge
	subjects [inlineCharges]string
}

// fromBatch returns b as an admission in the engine's in-process form,
// held in buf when it fits.
func fromBatch(b *sluice.Batch, buf *batchBuf) inproc.Admission {
	a := inproc.Admission{ID: b.ID, Deadline: b.Deadline.UnixNano(), Charges: buf.charges[:0], Subjects: buf.subjects[:0]}
	for i := range b.Charges {
		c := &b.Charges[i]
		subject := -1
		for j, s := range a.Subjects {
			if s == c.Key.Subject {
				subject = j
				break
			}
		}
		if subject < 0 {
			subject = len(a.Subjects)
			a.Subjects = append(a.Subjects, c.Key.Subject)
		}
		a.Charges = append(a.Charges, inproc.Charge{
			Subject: uint32(subject), Rule: c.Key.Rule, Period: c.Key.Period,
			Window: int64(c.Window), Limit: c.Limit, Burst: c.Burst,
			Amount: c.Amount, Actual: c.Actual, PeriodEnd: unixNano(c.PeriodEnd),
			Kind: kindOf(c.Kind), Shadow: c.Shadow, Release: c.OnExpiry == sluice.ExpiryRelease,
		})
	}
	return a
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
