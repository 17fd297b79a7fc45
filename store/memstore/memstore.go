// Package memstore is the in-process sluice.Store: counters in sharded maps,
// one critical section per admission. Unrelated subjects do not contend, and
// idle counters are evicted so memory stays bounded with millions of
// subjects. Nothing survives the process.
//
// A subject's counters, one per rule, share one map entry, so an admission
// hashes each subject once whatever the number of rules on it. A Limiter
// over a Store (not wrapped in another store) admits through AdmitLocal
// and SettleLocal, which read the engine's charges in place; every other
// caller goes through sluice.Store, and both reach the same counters.
package memstore

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/cacheline"
	"github.com/sluicehq/sluice/internal/inproc"
)

var _ sluice.Store = (*Store)(nil)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked maps (default 64).
	Shards int
	// EvictScan is how many subjects a shard scans for idle counters for
	// each counter it makes (default 2): new counters pay for dropping
	// idle ones, so that admissions to existing counters scan nothing and
	// idle counters take at most about as much room again as those in
	// use, whatever the churn of subjects. Sweep drops every idle
	// counter besides.
	EvictScan int
	// EvictEvery, when set, adds a scan of EvictScan subjects every
	// EvictEvery admissions a shard serves (default 0: none).
	EvictEvery int
	// EvictIdle is how long a counter must go untouched, once it holds
	// nothing worth keeping, before eviction drops it (default 10s). A
	// counter is dropped only when keeping it would change nothing, so
	// this bounds the memory of idle subjects, not correctness; the grace
	// spares a subject in use the cost of remaking its counters each time
	// a settlement leaves them whole.
	EvictIdle time.Duration
}

// Store is an in-memory sluice.Store. It is safe for concurrent use.
type Store struct {
	hash       hasher
	shards     []*paddedShard
	open       []*openShard
	evictEvery int
	evictScan  int
	evictIdle  int64
}

// storeLines holds a Store in cache lines of its own: every admission
// reads its hash seeds and shards (see internal/cacheline).
type storeLines struct {
	Store
	_ [(cacheline.Size - unsafe.Sizeof(Store{})%cacheline.Size) % cacheline.Size]byte
}

// openShard tracks admissions with budget charges, for the sweep. Each is
// allocated alone, in a line of its own, as every budget admission locks
// one.
type openShard struct {
	mu   sync.Mutex
	open map[uint64]openAdmission
	_    [cacheline.Size - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(map[uint64]openAdmission(nil))]byte
}

// openAdmission is an admission the sweep may have to settle. batch is the
// sluice.Batch it was admitted as, nil for AdmitLocal.
type openAdmission struct {
	adm   *inproc.Admission
	batch *sluice.Batch
}

// New returns an empty Store.
func New(opts Options) *Store {
	n := opts.Shards
	if n <= 0 {
		n = 64
	}
	s := &new(storeLines).Store
	*s = Store{hash: newHasher(), shards: cacheline.Slice[*paddedShard](n, n), open: make([]*openShard, n),
		evictEvery: opts.EvictEvery, evictScan: opts.EvictScan, evictIdle: int64(opts.EvictIdle)}
	if s.evictScan <= 0 {
		s.evictScan = 2
	}
	if s.evictIdle <= 0 {
		s.evictIdle = int64(10 * time.Second)
	}
	for i := range s.shards {
		// One allocation per shard, of a size class that is a multiple
		// of 64 bytes, puts each shard on a cache line of its own: an
		// array of shards would not be, as the allocator keeps a header
		// before an object of pointers larger than 512 bytes.
		s.shards[i] = new(paddedShard)
		s.shards[i].init()
		s.open[i] = &openShard{open: map[uint64]openAdmission{}}
	}
	return s
}

func (s *Store) shardOf(k subjectKey) int {
	return int(k.a % uint64(len(s.shards)))
}

// Admit checks every charge of b and applies all of them or none.
func (s *Store) Admit(_ context.Context, now time.Time, b *sluice.Batch) (bool, error) {
	var buf batchBuf
	a := fromBatch(b, &buf)
	ok := s.admit(now.UnixNano(), &a)
	toBatch(a.Charges, b)
	if ok && a.HasBudget() {
		// The sweep keeps its own copy: a is on the stack.
		kept := &inproc.Admission{ID: a.ID, Deadline: a.Deadline, Charges: slices.Clone(a.Charges), Subjects: slices.Clone(a.Subjects)}
		s.addOpen(openAdmission{adm: kept, batch: b})
	}
	return ok, nil
}

// AdmitLocal is Admit for an admission the engine built in this process:
// it checks every charge of a and applies all of them or none, filling
// each charge's results. A budget admission is kept, by pointer, for the
// sweep, so a must not change until settled (except Actual); the sweep
// copies it before it lets a concurrent SettleLocal return.
func (s *Store) AdmitLocal(now int64, a *inproc.Admission) (bool, error) {
	ok := s.admit(now, a)
	if ok && a.HasBudget() {
		s.addOpen(openAdmission{adm: a})
	}
	return ok, nil
}

// LocalStore returns s. A Limiter reads its charges in place, through
// AdmitLocal and SettleLocal, only over the Store itself, not over a type
// that embeds one and has its own Admit.
func (s *Store) LocalStore() sluice.Store { return s }

func (s *Store) admit(now int64, a *inproc.Admission) bool {
	if len(a.Subjects) == 1 && len(a.Charges) <= inlineCharges {
		return s.admitOne(now, a)
	}
	return s.admitPlanned(now, a)
}

// admitPlanned is admit for any admission.
func (s *Store) admitPlanned(now int64, a *inproc.Admission) bool {
	var p plan
	s.plan(&p, a)
	s.lock(&p.lockSet)
	defer s.unlock(&p.lockSet)
	ok := s.admitLocked(now, a, &p)
	if !p.all {
		for _, j := range p.idx[:p.n] {
			s.maybeEvict(&s.shards[j].shard, now)
		}
	}
	return ok
}

func (s *Store) admitLocked(now int64, a *inproc.Admission, p *plan) bool {
	s.resolve(p, a, true)
	var tats [inlineCharges][2]int64
	admit := true
	for i := range a.Charges {
		ch := &a.Charges[i]
		ch.Allowed, ch.RetryAfter = false, 0
		c, sh := s.counter(p, a, i)
		sh.claim(c, ch.Kind)
		switch ch.Kind {
		case inproc.Rate:
			tat, frac := bucketOf(ch).check(c, ch, now)
			if i < len(tats) {
				tats[i] = [2]int64{tat, frac}
			}
		case inproc.Budget:
			checkBudget(c, ch)
		case inproc.Concurrency:
			sh.checkConcurrency(c, ch, now)
		}
		if !ch.Allowed && !ch.Shadow {
			admit = false
		}
	}
	if !admit {
		return false
	}
	for i := range a.Charges {
		ch := &a.Charges[i]
		c, sh := s.counter(p, a, i)
		c.touched = now
		s.setRef(ch, p.subject(ch.Subject).shard, p.charge(i).slot)
		switch ch.Kind {
		case inproc.Rate:
			if ch.Allowed && i < len(tats) {
				c.tat, c.frac, c.drawnAt = tats[i][0], tats[i][1], ch.Limit
			} else {
				// A shadow charge over its limit, or one past the
				// inline array: draw it like an overrun.
				bucketOf(ch).adjust(c, ch.Amount, now)
			}
		case inproc.Budget:
			b := c.budget()
			b.reserved += ch.Amount
			b.end = ch.PeriodEnd
		case inproc.Concurrency:
			sh.addLease(c, lease{id: a.ID, expiry: a.Deadline})
		}
	}
	return true
}

// admitOne is admit for the charges of one subject, at most
// inlineCharges of them: one shard, one lock, the subject hashed and
// looked up once, and no plan. Its check and apply passes repeat
// admitLocked's, written out on purpose: taking them into shared
// functions cost 15 ns of the engine's 190 (calls the compiler does not
// inline). TestStore_AdmitOneAgreesWithAdmitPlanned keeps the two in step.
func (s *Store) admitOne(now int64, a *inproc.Admission) bool {
	k := s.hash.key(a.Subjects[0])
	j := s.shardOf(k)
	sh := &s.shards[j].shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var slots [inlineCharges]*slot
	var idx [inlineCharges]uint32
	head, last := sh.subjects.get(k), noSlot
	for i := range a.Charges {
		ch := &a.Charges[i]
		// As resolve: most likely the slot after the last one found,
		// and most likely at the next index, as a subject's slots are
		// made together. That slot's address does not wait for the last
		// slot's next to be read, so the two cache misses overlap
		// rather than follow each other.
		found := noSlot
		if last != noSlot {
			prev := slots[i-1]
			if near := last + 1; near>>chunkBits < uint32(len(sh.chunks)) {
				if sl := sh.at(near); prev.next == near && sl.rule == ch.Rule && sl.period == ch.Period {
					found = near
				}
			}
			if found == noSlot {
				if next := prev.next; next != noSlot {
					if sl := sh.at(next); sl.rule == ch.Rule && sl.period == ch.Period {
						found = next
					}
				}
			}
		}
		if found == noSlot {
			var tail uint32
			found, tail = sh.find(head, ch.Rule, ch.Period)
			if found == noSlot {
				found = sh.add(k, tail, ch.Rule, ch.Period)
				if tail == noSlot {
					head = found
				}
			}
		}
		idx[i], slots[i], last = found, sh.at(found), found
	}
	var tats [inlineCharges][2]int64
	admit := true
	for i := range a.Charges {
		ch := &a.Charges[i]
		ch.Allowed, ch.RetryAfter = false, 0
		c := &slots[i].counter
		sh.claim(c, ch.Kind)
		switch ch.Kind {
		case inproc.Rate:
			tats[i][0], tats[i][1] = bucketOf(ch).check(c, ch, now)
		case inproc.Budget:
			checkBudget(c, ch)
		case inproc.Concurrency:
			sh.checkConcurrency(c, ch, now)
		}
		if !ch.Allowed && !ch.Shadow {
			admit = false
		}
	}
	if admit {
		ref := j <= math.MaxUint16
		for i := range a.Charges {
			ch := &a.Charges[i]
			sl := slots[i]
			c := &sl.counter
			c.touched = now
			if ref {
				ch.Shard, ch.Ref = uint16(j), uint64(sl.gen)<<32|uint64(idx[i]+1)
			}
			switch ch.Kind {
			case inproc.Rate:
				if ch.Allowed {
					c.tat, c.frac, c.drawnAt = tats[i][0], tats[i][1], ch.Limit
				} else {
					// A shadow charge over its limit: draw it like
					// an overrun.
					bucketOf(ch).adjust(c, ch.Amount, now)
				}
			case inproc.Budget:
				b := c.budget()
				b.reserved += ch.Amount
				b.end = ch.PeriodEnd
			case inproc.Concurrency:
				sh.addLease(c, lease{id: a.ID, expiry: a.Deadline})
			}
		}
	}
	s.maybeEvict(sh, now)
	return admit
}

// Settle applies each charge's Actual in place of its Amount and frees the
// batch's leases. A batch the sweep already settled is left alone.
func (s *Store) Settle(_ context.Context, now time.Time, b *sluice.Batch) error {
	_, err := s.SettleOpen(now, b)
	return err
}

// SettleOpen is Settle, reporting whether the batch was applied (false when
// the sweep had already settled it), for a durable store built on this one.
func (s *Store) SettleOpen(now time.Time, b *sluice.Batch) (bool, error) {
	var buf batchBuf
	a := fromBatch(b, &buf)
	return s.settle(now.UnixNano(), &a), nil
}

// SettleLocal is Settle for an admission of AdmitLocal: each charge's
// Actual replaces its Amount, and the leases are freed. An admission the
// sweep already settled is left alone.
func (s *Store) SettleLocal(_ context.Context, now int64, a *inproc.Admission) error {
	s.settle(now, a)
	return nil
}

// SettleLocalOpen is SettleLocal, reporting whether the admission was
// applied (false when the sweep had already settled it), for a durable
// store built on this one.
func (s *Store) SettleLocalOpen(now int64, a *inproc.Admission) bool {
	return s.settle(now, a)
}

func (s *Store) settle(now int64, a *inproc.Admission) bool {
	if a.HasBudget() && !s.takeOpen(a.ID) {
		return false
	}
	if s.settleByRef(now, a) {
		return true
	}
	var p plan
	s.plan(&p, a)
	s.lock(&p.lockSet)
	s.applyLocked(now, a, &p, nil)
	s.unlock(&p.lockSet)
	return true
}

// setRef keeps in ch where its counter is, for settleByRef: the slot and
// its generation, which changes when the slot is given back.
func (s *Store) setRef(ch *inproc.Charge, shard int, slot uint32) {
	if shard > math.MaxUint16 {
		return
	}
	ch.Shard = uint16(shard)
	ch.Ref = uint64(s.shards[shard].at(slot).gen)<<32 | uint64(slot+1)
}

// settleByRef settles a through the counters its charges found at
// admission, without hashing or looking up subjects, and reports whether
// it could: not when a charge has no reference, or when one of the
// counters was evicted since (its slot's generation moved on), in which
// case nothing is applied.
func (s *Store) settleByRef(now int64, a *inproc.Admission) bool {
	if len(a.Charges) == 0 {
		return true
	}
	first, one := a.Charges[0].Shard, true
	for i := range a.Charges {
		ch := &a.Charges[i]
		if ch.Ref == 0 {
			return false
		}
		one = one && ch.Shard == first
	}
	if !one {
		return s.settleByRefs(now, a)
	}
	sh := &s.shards[first].shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range a.Charges {
		ch := &a.Charges[i]
		if sh.at(uint32(ch.Ref)-1).gen != uint32(ch.Ref>>32) {
			return false
		}
	}
	for i := range a.Charges {
		ch := &a.Charges[i]
		s.applyOne(now, a.ID, ch, &sh.at(uint32(ch.Ref)-1).counter, sh, ch.Actual)
	}
	return true
}

// settleByRefs is settleByRef for charges on several shards, every one
// with a reference.
func (s *Store) settleByRefs(now int64, a *inproc.Admission) bool {
	var ls lockSet
	for i := range a.Charges {
		ls.add(int(a.Charges[i].Shard))
	}
	s.lock(&ls)
	defer s.unlock(&ls)
	for i := range a.Charges {
		ch := &a.Charges[i]
		if sl := s.shards[ch.Shard].at(uint32(ch.Ref) - 1); sl.gen != uint32(ch.Ref>>32) {
			return false
		}
	}
	for i := range a.Charges {
		ch := &a.Charges[i]
		sh := &s.shards[ch.Shard].shard
		s.applyOne(now, a.ID, ch, &sh.at(uint32(ch.Ref)-1).counter, sh, ch.Actual)
	}
	return true
}

func (s *Store) addOpen(o openAdmission) {
	sh := s.open[o.adm.ID%uint64(len(s.open))]
	sh.mu.Lock()
	sh.open[o.adm.ID] = o
	sh.mu.Unlock()
}

// takeOpen removes an open admission, reporting whether it was there.
func (s *Store) takeOpen(id uint64) bool {
	o := s.open[id%uint64(len(s.open))]
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.open[id]; !ok {
		return false
	}
	delete(o.open, id)
	return true
}

// applyLocked settles a locked admission at the Actual amounts, or at
// actual when it is not nil.
func (s *Store) applyLocked(now int64, a *inproc.Admission, p *plan, actual []int64) {
	s.resolve(p, a, true)
	for i := range a.Charges {
		ch := &a.Charges[i]
		c, sh := s.counter(p, a, i)
		// Actual only without actual: when the sweep settles, the
		// engine may be writing it.
		var amount int64
		if actual != nil {
			amount = actual[i]
		} else {
			amount = ch.Actual
		}
		s.applyOne(now, a.ID, ch, c, sh, amount)
	}
}

// applyOne settles charge ch of admission id at amount on its counter c,
// in shard sh, locked.
func (s *Store) applyOne(now int64, id uint64, ch *inproc.Charge, c *counter, sh *shard, amount int64) {
	c.touched = max(c.touched, now)
	sh.claim(c, ch.Kind)
	switch ch.Kind {
	case inproc.Rate:
		// A charge settled at its reservation leaves its bucket as it is.
		if delta := amount - ch.Amount; delta != 0 {
			bucketOf(ch).adjust(c, delta, now)
		}
	case inproc.Budget:
		b := c.budget()
		b.reserved = max(0, b.reserved-ch.Amount)
		b.used += amount
		b.end = ch.PeriodEnd
	case inproc.Concurrency:
		sh.dropLease(c, id)
	}
}

// Peek fills the result fields of b's charges without charging.
func (s *Store) Peek(_ context.Context, now time.Time, b *sluice.Batch) error {
	var buf batchBuf
	a := fromBatch(b, &buf)
	charges := a.Charges
	n := now.UnixNano()
	var p plan
	s.plan(&p, &a)
	s.lock(&p.lockSet)
	s.resolve(&p, &a, false)
	for i := range charges {
		ch := &charges[i]
		c, sh := s.counter(&p, &a, i)
		if c == nil || c.kind != ch.Kind && c.kind != 0 {
			// No counter yet, or one of another kind, which an
			// admission would start afresh.
			c = &counter{}
		}
		saved := ch.Amount
		ch.Amount = 0
		switch ch.Kind {
		case inproc.Rate:
			bucketOf(ch).check(c, ch, n)
		case inproc.Budget:
			checkBudget(c, ch)
		case inproc.Concurrency:
			sh.checkConcurrency(c, ch, n)
			held, _ := sh.heldLeases(c)
			ch.Used, ch.Remaining = held, max(0, ch.Limit-held)
		}
		ch.Amount = saved
	}
	s.unlock(&p.lockSet)
	toBatch(charges, b)
	return nil
}

// Close does nothing; it exists to satisfy sluice.Store.
func (s *Store) Close() error { return nil }

// Len returns the number of counters held, for tests and memory reports.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := s.shards[i]
		sh.mu.Lock()
		n += sh.count()
		sh.mu.Unlock()
	}
	return n
}

// RestoreBudget sets a budget counter's settled usage, for a durable store
// reloading its journal.
func (s *Store) RestoreBudget(key sluice.CounterKey, periodEnd time.Time, used int64) {
	k := s.hash.key(key.Subject)
	sh := &s.shards[s.shardOf(k)].shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	head := sh.subjects.get(k)
	i, last := sh.find(head, key.Rule, key.Period)
	if i == noSlot {
		i = sh.add(k, last, key.Rule, key.Period)
		// A counter reloaded from the journal is not a new arrival and
		// owes no eviction scan: a store reloading a million budgets
		// would otherwise have its first admissions scan whole shards.
		sh.made--
	}
	sl := sh.at(i)
	sh.claim(&sl.counter, inproc.Budget)
	b := sl.budget()
	b.used = used
	b.end = periodEnd.UnixNano()
}
