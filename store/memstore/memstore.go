// Package memstore is the in-process sluice.Store: counters in sharded maps,
// one critical section per admission. Unrelated subjects do not contend, and
// idle counters are evicted so memory stays bounded with millions of
// subjects. Nothing survives the process.
package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

var _ sluice.Store = (*Store)(nil)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked maps (default 64).
	Shards int
	// EvictEvery is how many admissions a shard serves between two eviction
	// scans of EvictScan counters (defaults 64 and 16).
	EvictEvery int
	EvictScan  int
}

// Store is an in-memory sluice.Store. It is safe for concurrent use.
type Store struct {
	seed       maphash.Seed
	shards     []shard
	open       []openShard
	evictEvery int
	evictScan  int
}

type shard struct {
	mu       sync.Mutex
	counters map[sluice.CounterKey]*counter
	ops      int
	_        [40]byte // keep neighbouring locks off one cache line
}

// openShard tracks admitted batches with budget charges, for the sweep.
type openShard struct {
	mu      sync.Mutex
	batches map[uint64]*sluice.Batch
}

// New returns an empty Store.
func New(opts Options) *Store {
	n := opts.Shards
	if n <= 0 {
		n = 64
	}
	s := &Store{seed: maphash.MakeSeed(), shards: make([]shard, n), open: make([]openShard, n),
		evictEvery: opts.EvictEvery, evictScan: opts.EvictScan}
	if s.evictEvery <= 0 {
		s.evictEvery = 64
	}
	if s.evictScan <= 0 {
		s.evictScan = 16
	}
	for i := range s.shards {
		s.shards[i].counters = map[sluice.CounterKey]*counter{}
		s.open[i].batches = map[uint64]*sluice.Batch{}
	}
	return s
}

func (s *Store) shardOf(k *sluice.CounterKey) int {
	return int(maphash.String(s.seed, k.Subject) % uint64(len(s.shards)))
}

// lockSet is the set of shards a batch touches, locked in ascending order
// so that two batches never deadlock. Batches of more than maxLockSet
// distinct shards lock every shard.
type lockSet struct {
	idx [maxLockSet]int
	n   int
	all bool
	// of is the shard of each of the batch's first maxLockSet charges, so
	// a subject is hashed once per call.
	of [maxLockSet]int
}

const maxLockSet = 8

func (s *Store) lock(b *sluice.Batch) lockSet {
	var ls lockSet
	for i := range b.Charges {
		j := s.shardOf(&b.Charges[i].Key)
		if i < maxLockSet {
			ls.of[i] = j
		}
		if ls.all {
			continue
		}
		pos := 0
		for pos < ls.n && ls.idx[pos] < j {
			pos++
		}
		if pos < ls.n && ls.idx[pos] == j {
			continue
		}
		if ls.n == maxLockSet {
			ls.all = true
			continue
		}
		copy(ls.idx[pos+1:ls.n+1], ls.idx[pos:ls.n])
		ls.idx[pos] = j
		ls.n++
	}
	if ls.all {
		for j := range s.shards {
			s.shards[j].mu.Lock()
		}
		return ls
	}
	for _, j := range ls.idx[:ls.n] {
		s.shards[j].mu.Lock()
	}
	return ls
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

// shardFor returns the shard of charge i of a locked batch.
func (s *Store) shardFor(ls *lockSet, b *sluice.Batch, i int) int {
	if i < maxLockSet {
		return ls.of[i]
	}
	return s.shardOf(&b.Charges[i].Key)
}

func (s *Store) counter(k *sluice.CounterKey, create bool) *counter {
	return s.counterIn(s.shardOf(k), k, create)
}

func (s *Store) counterIn(shard int, k *sluice.CounterKey, create bool) *counter {
	sh := &s.shards[shard]
	c := sh.counters[*k]
	if c == nil && create {
		c = &counter{}
		sh.counters[*k] = c
	}
	return c
}

// Admit checks every charge of b and applies all of them or none.
func (s *Store) Admit(_ context.Context, now time.Time, b *sluice.Batch) (bool, error) {
	ls := s.lock(b)
	defer s.unlock(&ls)
	ok := s.admitLocked(now.UnixNano(), b, &ls)
	if !ls.all {
		for _, j := range ls.idx[:ls.n] {
			s.maybeEvict(&s.shards[j], now.UnixNano())
		}
	}
	if ok && hasBudget(b) {
		o := &s.open[b.ID%uint64(len(s.open))]
		o.mu.Lock()
		o.batches[b.ID] = b
		o.mu.Unlock()
	}
	return ok, nil
}

func (s *Store) admitLocked(now int64, b *sluice.Batch, ls *lockSet) bool {
	var tats [maxLockSet][2]int64
	var found [maxLockSet]*counter
	admit := true
	for i := range b.Charges {
		ch := &b.Charges[i]
		ch.Allowed, ch.RetryAfter = false, 0
		c := s.counterIn(s.shardFor(ls, b, i), &ch.Key, true)
		if i < maxLockSet {
			found[i] = c
		}
		switch ch.Kind {
		case sluice.KindRate:
			tat, frac := bucketOf(ch).check(c, ch, now)
			if i < len(tats) {
				tats[i] = [2]int64{tat, frac}
			}
		case sluice.KindBudget:
			checkBudget(c, ch)
		case sluice.KindConcurrency:
			checkConcurrency(c, ch, now)
		}
		if !ch.Allowed && !ch.Shadow {
			admit = false
		}
	}
	if !admit {
		return false
	}
	for i := range b.Charges {
		ch := &b.Charges[i]
		var c *counter
		if i < maxLockSet {
			c = found[i]
		} else {
			c = s.counterIn(s.shardFor(ls, b, i), &ch.Key, true)
		}
		switch ch.Kind {
		case sluice.KindRate:
			if ch.Allowed && i < len(tats) {
				c.tat, c.frac, c.drawnAt = tats[i][0], tats[i][1], ch.Limit
			} else {
				// A shadow charge over its limit, or one past the
				// inline array: draw it like an overrun.
				bucketOf(ch).adjust(c, ch.Amount, now)
			}
		case sluice.KindBudget:
			c.reserved += ch.Amount
			c.end = ch.PeriodEnd.UnixNano()
		case sluice.KindConcurrency:
			c.leases = append(c.leases, lease{id: b.ID, expiry: b.Deadline.UnixNano()})
		}
	}
	return true
}

func hasBudget(b *sluice.Batch) bool {
	for i := range b.Charges {
		if b.Charges[i].Kind == sluice.KindBudget {
			return true
		}
	}
	return false
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
	if hasBudget(b) && !s.takeOpen(b.ID) {
		return false, nil
	}
	ls := s.lock(b)
	defer s.unlock(&ls)
	s.applyLocked(now.UnixNano(), b, &ls, nil)
	return true, nil
}

// takeOpen removes an open batch, reporting whether it was there.
func (s *Store) takeOpen(id uint64) bool {
	o := &s.open[id%uint64(len(s.open))]
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.batches[id]; !ok {
		return false
	}
	delete(o.batches, id)
	return true
}

// applyLocked settles a locked batch at the Actual amounts, or at actual
// when it is not nil.
func (s *Store) applyLocked(now int64, b *sluice.Batch, ls *lockSet, actual []int64) {
	for i := range b.Charges {
		ch := &b.Charges[i]
		c := s.counterIn(s.shardFor(ls, b, i), &ch.Key, true)
		amount := ch.Actual
		if actual != nil {
			amount = actual[i]
		}
		switch ch.Kind {
		case sluice.KindRate:
			bucketOf(ch).adjust(c, amount-ch.Amount, now)
		case sluice.KindBudget:
			c.reserved = max(0, c.reserved-ch.Amount)
			c.used += amount
			c.end = ch.PeriodEnd.UnixNano()
		case sluice.KindConcurrency:
			c.leases = slices.DeleteFunc(c.leases, func(l lease) bool { return l.id == b.ID })
		}
	}
}

// Peek fills the result fields of b's charges without charging.
func (s *Store) Peek(_ context.Context, now time.Time, b *sluice.Batch) error {
	ls := s.lock(b)
	defer s.unlock(&ls)
	n := now.UnixNano()
	for i := range b.Charges {
		ch := &b.Charges[i]
		c := s.counterIn(s.shardFor(&ls, b, i), &ch.Key, false)
		if c == nil {
			c = &counter{}
		}
		saved := ch.Amount
		ch.Amount = 0
		switch ch.Kind {
		case sluice.KindRate:
			bucketOf(ch).check(c, ch, n)
		case sluice.KindBudget:
			checkBudget(c, ch)
		case sluice.KindConcurrency:
			checkConcurrency(c, ch, n)
			ch.Used, ch.Remaining = int64(len(c.leases)), max(0, ch.Limit-int64(len(c.leases)))
		}
		ch.Amount = saved
	}
	return nil
}

// Expired is a batch the sweep settled, with the amount each charge was
// settled at.
type Expired struct {
	Batch  *sluice.Batch
	Actual []int64
}

// Sweep settles the batches past their deadline.
func (s *Store) Sweep(_ context.Context, now time.Time) (sluice.SweepResult, error) {
	_, res := s.SweepExpired(now)
	s.evictAll(now.UnixNano())
	return res, nil
}

// SweepExpired settles the batches past their deadline and returns them, so
// that a durable store built on this one can journal what it did.
func (s *Store) SweepExpired(now time.Time) ([]Expired, sluice.SweepResult) {
	var due []*sluice.Batch
	for i := range s.open {
		o := &s.open[i]
		o.mu.Lock()
		for id, b := range o.batches {
			if !b.Deadline.After(now) {
				due = append(due, b)
				delete(o.batches, id)
			}
		}
		o.mu.Unlock()
	}
	var res sluice.SweepResult
	out := make([]Expired, 0, len(due))
	for _, b := range due {
		e := Expired{Batch: b, Actual: make([]int64, len(b.Charges))}
		for i := range b.Charges {
			ch := &b.Charges[i]
			e.Actual[i] = ch.Amount
			if ch.Kind == sluice.KindBudget {
				if ch.OnExpiry == sluice.ExpiryRelease {
					e.Actual[i] = 0
					res.Released++
				} else {
					res.Charged++
				}
			}
		}
		ls := s.lock(b)
		s.applyLocked(now.UnixNano(), b, &ls, e.Actual)
		s.unlock(&ls)
		res.Reservations++
		out = append(out, e)
	}
	return out, res
}

// Close does nothing; it exists to satisfy sluice.Store.
func (s *Store) Close() error { return nil }

// maybeEvict scans a few counters of a locked shard every evictEvery
// admissions and drops the idle ones.
func (s *Store) maybeEvict(sh *shard, now int64) {
	sh.ops++
	if sh.ops < s.evictEvery {
		return
	}
	sh.ops = 0
	scanned := 0
	for k, c := range sh.counters {
		if c.idle(now) {
			delete(sh.counters, k)
		}
		if scanned++; scanned >= s.evictScan {
			break
		}
	}
}

func (s *Store) evictAll(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, c := range sh.counters {
			if c.idle(now) {
				delete(sh.counters, k)
			}
		}
		sh.mu.Unlock()
	}
}

// Len returns the number of counters held, for tests and memory reports.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.counters)
		sh.mu.Unlock()
	}
	return n
}

// RestoreBudget sets a budget counter's settled usage, for a durable store
// reloading its journal.
func (s *Store) RestoreBudget(key sluice.CounterKey, periodEnd time.Time, used int64) {
	sh := &s.shards[s.shardOf(&key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := s.counter(&key, true)
	c.used = used
	c.end = periodEnd.UnixNano()
}
