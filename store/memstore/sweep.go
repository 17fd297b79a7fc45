package memstore

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/counter"
)

// Sweep settles the batches past their deadline and drops every idle
// counter.
func (s *Store) Sweep(ctx context.Context, now time.Time) (sluice.SweepResult, error) {
	res, _, err := s.SweepReport(ctx, now)
	return res, err
}

// SweepReport is Sweep, and tells what it settled.
func (s *Store) SweepReport(_ context.Context, now time.Time) (sluice.SweepResult, []sluice.Batch, error) {
	swept, res := s.SweepExpired(now)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.evict(math.MaxInt, now.UnixNano(), int64(s.opts.EvictIdle))
		sh.mu.Unlock()
	}
	return res, swept, nil
}

// SweepExpired settles the batches past their deadline and returns them,
// each charge's Actual what it was settled at, so that a durable store
// built on this one can journal what it did: a budget charge is charged
// its Amount, or refunded when its rule says ExpiryRelease; other kinds
// charge nothing (rate buckets keep what they hold, leases expire with the
// batch).
func (s *Store) SweepExpired(now time.Time) (swept []sluice.Batch, res sluice.SweepResult) {
	s.openMu.Lock()
	for id, b := range s.open {
		if b.Deadline.After(now) {
			continue
		}
		delete(s.open, id)
		for i := range b.Charges {
			c := &b.Charges[i]
			c.Actual = 0
			switch {
			case c.Kind != sluice.KindBudget:
			case c.OnExpiry == sluice.ExpiryRelease:
				res.Released++
			default:
				c.Actual = c.Amount
				res.Charged++
			}
		}
		swept = append(swept, b)
	}
	s.openMu.Unlock()
	for _, b := range swept {
		s.apply(now.UnixNano(), b, true)
	}
	res.Reservations = len(swept)
	return swept, res
}

// maybeEvict runs the eviction scan a locked shard owes: EvictScan counters
// for each counter it made since the last scan, and EvictScan more every
// EvictEvery admissions when that is set. The subjects that arrive pay for
// the eviction: an admission to counters that exist scans nothing, and with
// two counters looked at per counter made, idle counters take about as much
// room again as the live ones at most.
func (s *Store) maybeEvict(sh *shard, now int64) {
	n := sh.made * s.opts.EvictScan
	sh.made = 0
	if sh.ops++; s.opts.EvictEvery > 0 && sh.ops >= s.opts.EvictEvery {
		sh.ops = 0
		n += s.opts.EvictScan
	}
	if n > 0 {
		// An admission to counters that exist scans nothing.
		sh.evict(n, now, int64(s.opts.EvictIdle))
	}
}

// evict looks at the counters of a locked shard's subjects, from a place
// the map picks at random, until it has looked at n, and drops those idle
// for grace ns, and the subjects left with none.
func (sh *shard) evict(n int, now, grace int64) {
	for subject, list := range sh.subjects {
		if n <= 0 {
			break
		}
		n -= len(list)
		kept := slices.DeleteFunc(list, func(st *state) bool { return st.idle(now, grace) })
		if len(kept) == 0 {
			delete(sh.subjects, subject)
		} else if len(kept) < len(list) {
			sh.subjects[subject] = kept
		}
	}
}

// idle reports whether a counter holds nothing worth keeping (a full
// bucket, an empty or finished budget, no live lease: the zero fields of
// the kinds it is not hold nothing either) and has not been touched for
// grace ns. Its expired leases are dropped either way, as a check drops
// them.
func (st *state) idle(now, grace int64) bool {
	st.leases = counter.Live(st.leases, now)
	return now-st.touched >= grace && st.rate.Full(now) && st.budget.Idle(now) && len(st.leases) == 0
}
