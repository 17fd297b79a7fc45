// Package memstore is the in-process sluice.Store: counters in sharded maps
// (a subject's counters, one per rule and period, listed under the
// subject), one lock per shard. Unrelated subjects rarely contend, and idle
// counters are evicted so memory stays bounded with millions of subjects.
// Nothing survives the process.
package memstore

import (
	"cmp"
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/counter"
)

var (
	_ sluice.Store        = (*Store)(nil)
	_ sluice.AsyncSettler = (*Store)(nil)
	_ sluice.LeaseRenewer = (*Store)(nil)
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked maps (default 64).
	Shards int
	// EvictScan is how many counters a shard looks at for idle ones for
	// each counter it makes (default 2): new counters pay for dropping
	// idle ones, so that admissions to existing counters scan nothing and
	// idle counters take about as much room again as those in use at
	// most, whatever the churn of subjects. Sweep drops every idle counter
	// besides.
	EvictScan int
	// EvictEvery, when set, adds a scan of EvictScan counters every
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
	seed   maphash.Seed
	shards []shard
	// opts are the Options with their defaults.
	opts Options

	// open holds the admitted batches with budget charges, for the sweep
	// to settle if nobody does: each a copy of the batch, its charges
	// copied too, whose Deadline is the batch's own, or a renewal's.
	openMu sync.Mutex
	open   map[uint64]sluice.Batch
}

// shard holds the counters of the subjects that hash to it.
type shard struct {
	mu       sync.Mutex
	subjects map[string][]*state
	// made counts the counters made since the last eviction scan, ops the
	// admissions since the last scan owed to Options.EvictEvery.
	made, ops int
}

// state is one counter of a subject: the rest of its key, and its state. A
// key belongs to one rule, so to one kind (a rule's fingerprint covers its
// kind), whose field holds the state; the fields of the other kinds stay
// zero, which is what a fresh counter holds.
type state struct {
	rule   uint64
	period int64
	rate   counter.Rate
	budget counter.Budget
	leases []counter.Lease
	// touched is when the counter was last admitted to or settled (Unix
	// ns): eviction spares it for a grace period after that.
	touched int64
}

// New returns an empty Store.
func New(opts Options) *Store {
	// A setting that is not positive takes its default.
	opts.Shards = cmp.Or(max(opts.Shards, 0), 64)
	opts.EvictScan = cmp.Or(max(opts.EvictScan, 0), 2)
	opts.EvictIdle = cmp.Or(max(opts.EvictIdle, 0), 10*time.Second)
	s := &Store{seed: maphash.MakeSeed(), shards: make([]shard, opts.Shards), opts: opts, open: map[uint64]sluice.Batch{}}
	for i := range s.shards {
		s.shards[i].subjects = map[string][]*state{}
	}
	return s
}

// shardOf returns the index of a subject's shard: all of a subject's
// counters are in one shard, so an admission on one subject takes one lock.
func (s *Store) shardOf(subject string) int {
	return int(maphash.String(s.seed, subject) % uint64(len(s.shards)))
}

// lock appends to of the shard of each charge, and to locked the shards it
// locks: ascending and each once, so that two calls never wait for each
// other in a cycle. The callers pass slices of arrays of their own, room
// for most calls without allocating.
func (s *Store) lock(charges []sluice.Charge, of, locked []int) ([]int, []int) {
	for i := range charges {
		j := s.shardOf(charges[i].Key.Subject)
		of = append(of, j)
		if k, found := slices.BinarySearch(locked, j); !found {
			locked = slices.Insert(locked, k, j)
		}
	}
	for _, j := range locked {
		s.shards[j].mu.Lock()
	}
	return of, locked
}

func (s *Store) unlock(shards []int) {
	for _, j := range shards {
		s.shards[j].mu.Unlock()
	}
}

// get returns the counter of key, made if missing, in a locked shard.
func (sh *shard) get(key sluice.CounterKey) *state {
	st := sh.find(key)
	if st == nil {
		st = &state{rule: key.Rule, period: key.Period}
		sh.subjects[key.Subject] = append(sh.subjects[key.Subject], st)
		sh.made++
	}
	return st
}

// find returns the counter of key in a locked shard, nil if it has none.
func (sh *shard) find(key sluice.CounterKey) *state {
	for _, st := range sh.subjects[key.Subject] {
		if st.rule == key.Rule && st.period == key.Period {
			return st
		}
	}
	return nil
}

func bucketOf(c *sluice.Charge) counter.Bucket {
	return counter.Bucket{Limit: c.Limit, Burst: c.BurstOrLimit(), Window: int64(c.Window)}
}

// check evaluates amount of charge c on its counter st at now, writes what
// it found to found, and returns the bucket as a rate charge would leave
// it.
func check(c *sluice.Charge, st *state, amount, now int64, found *sluice.ChargeResult) (next counter.Rate) {
	var res counter.Result
	switch c.Kind {
	case sluice.KindRate:
		next, res = bucketOf(c).Check(st.rate, amount, now)
	case sluice.KindBudget:
		res = st.budget.Check(c.Limit, amount, c.PeriodEnd.UnixNano())
	case sluice.KindConcurrency:
		st.leases = counter.Live(st.leases, now)
		res = counter.CheckLeases(st.leases, c.Limit, now)
	}
	*found = sluice.ChargeResult{Allowed: res.Allowed, Remaining: res.Remaining, Used: res.Used, RetryAfter: time.Duration(res.RetryAfter)}
	// A budget resets at its period's end, a bucket when full, leases at
	// the earliest expiry.
	if res.ResetAt != 0 {
		found.ResetAt = time.Unix(0, res.ResetAt)
	}
	return next
}

// Admit checks every charge of b and applies all of them or none: first
// every charge is checked, then, when every charge that is not Shadow
// fits, all are applied.
func (s *Store) Admit(_ context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	at := now.UnixNano()
	var ofBuf, lockBuf [8]int
	of, lock := s.lock(b.Charges, ofBuf[:0], lockBuf[:0])
	// Each charge's counter and, for a rate charge, the bucket as the
	// charge would leave it.
	var stateBuf [8]*state
	var nextBuf [8]counter.Rate
	states, next, ok := stateBuf[:0], nextBuf[:0], true
	for i := range b.Charges {
		c := &b.Charges[i]
		st := s.shards[of[i]].get(c.Key)
		states, next = append(states, st), append(next, check(c, st, c.Amount, at, &results[i]))
		ok = ok && (results[i].Allowed || c.Shadow)
	}
	if ok {
		for i, st := range states {
			c := &b.Charges[i]
			st.touched = at
			switch c.Kind {
			case sluice.KindRate:
				if results[i].Allowed {
					st.rate = next[i]
				} else {
					// A shadow charge over its limit draws the bucket as
					// an overrun does.
					st.rate = bucketOf(c).Adjust(st.rate, c.Amount, at)
				}
			case sluice.KindBudget:
				st.budget = st.budget.Reserve(c.Amount, c.PeriodEnd.UnixNano())
			case sluice.KindConcurrency:
				st.leases = append(st.leases, counter.Lease{ID: b.ID, Expiry: b.Deadline.UnixNano()})
			}
		}
	}
	for _, j := range lock {
		s.maybeEvict(&s.shards[j], at)
	}
	s.unlock(lock)
	if ok && hasBudget(b) {
		// The batch is the caller's: the sweep keeps a copy.
		b.Charges = slices.Clone(b.Charges)
		s.openMu.Lock()
		s.open[b.ID] = b
		s.openMu.Unlock()
	}
	return ok, nil
}

// Settle applies each charge's Actual in place of its Amount and frees the
// batch's leases. A batch the sweep already settled is left alone.
func (s *Store) Settle(_ context.Context, now time.Time, b sluice.Batch) error {
	_, err := s.SettleOpen(now, b)
	return err
}

// SettleOpen is Settle, reporting whether the batch was applied (false when
// the sweep had already settled it), for a durable store built on this one.
func (s *Store) SettleOpen(now time.Time, b sluice.Batch) (bool, error) {
	if hasBudget(b) {
		s.openMu.Lock()
		_, open := s.open[b.ID]
		delete(s.open, b.ID)
		s.openMu.Unlock()
		if !open {
			return false, nil
		}
	}
	s.apply(now.UnixNano(), b, false)
	return true, nil
}

// SettleAsync is Settle, telling done before it returns: nothing in
// memory is waited for.
func (s *Store) SettleAsync(ctx context.Context, now time.Time, b sluice.Batch, done func(error)) {
	done(s.Settle(ctx, now, b))
}

// apply settles b at its Actual amounts; swept, only its budget charges
// (its rate buckets keep what they hold, its leases expired with it).
func (s *Store) apply(now int64, b sluice.Batch, swept bool) {
	var ofBuf, lockBuf [8]int
	of, lock := s.lock(b.Charges, ofBuf[:0], lockBuf[:0])
	defer s.unlock(lock)
	for i := range b.Charges {
		c := &b.Charges[i]
		if c.Kind == sluice.KindRate && c.Actual == c.Amount || swept && c.Kind != sluice.KindBudget {
			// A rate charge settled at its reservation leaves its bucket
			// as it is, and the sweep settles budgets only: neither is
			// looked up.
			continue
		}
		st := s.shards[of[i]].get(c.Key)
		st.touched = max(st.touched, now)
		switch c.Kind {
		case sluice.KindRate:
			st.rate = bucketOf(c).Adjust(st.rate, c.Actual-c.Amount, now)
		case sluice.KindBudget:
			st.budget = st.budget.Settle(c.Amount, c.Actual, c.PeriodEnd.UnixNano())
		case sluice.KindConcurrency:
			st.leases = counter.Drop(st.leases, b.ID)
		}
	}
}

// Peek writes what each of b's charges would find, without charging.
func (s *Store) Peek(_ context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) error {
	at := now.UnixNano()
	var ofBuf, lockBuf [8]int
	of, lock := s.lock(b.Charges, ofBuf[:0], lockBuf[:0])
	defer s.unlock(lock)
	for i := range b.Charges {
		c := &b.Charges[i]
		st := s.shards[of[i]].find(c.Key)
		if st == nil {
			// No counter yet: what an admission would make.
			st = &state{}
		}
		check(c, st, 0, at, &results[i])
		if c.Kind == sluice.KindConcurrency {
			// The leases held, not counting the one an admission would
			// add.
			results[i].Used, results[i].Remaining = int64(len(st.leases)), max(0, c.Limit-int64(len(st.leases)))
		}
	}
	return nil
}

// Reserved returns what open reservations hold on each budget counter of
// keys.
func (s *Store) Reserved(_ context.Context, keys []sluice.CounterKey) ([]int64, error) {
	out := make([]int64, len(keys))
	for i, k := range keys {
		sh := &s.shards[s.shardOf(k.Subject)]
		sh.mu.Lock()
		if st := sh.find(k); st != nil {
			out[i] = st.budget.Reserved
		}
		sh.mu.Unlock()
	}
	return out, nil
}

// Close does nothing; it exists to satisfy sluice.Store.
func (s *Store) Close() error { return nil }

// Len returns the number of counters held, for tests and memory reports.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		for _, list := range s.shards[i].subjects {
			n += len(list)
		}
		s.shards[i].mu.Unlock()
	}
	return n
}

// RestoreBudget sets a budget counter's settled usage, for a durable store
// reloading its journal.
func (s *Store) RestoreBudget(key sluice.CounterKey, periodEnd time.Time, used int64) {
	sh := &s.shards[s.shardOf(key.Subject)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	made := sh.made
	st := sh.get(key)
	// A counter reloaded from the journal is not a new arrival and owes
	// no eviction scan.
	sh.made = made
	st.budget.Used, st.budget.End = counter.Clamp(used), periodEnd.UnixNano()
}

func hasBudget(b sluice.Batch) bool {
	for i := range b.Charges {
		if b.Charges[i].Kind == sluice.KindBudget {
			return true
		}
	}
	return false
}
