package memstore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/inproc"
)

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
	n := now.UnixNano()
	var due []openAdmission
	for i := range s.open {
		o := s.open[i]
		o.mu.Lock()
		for id, a := range o.open {
			if a.adm.Deadline <= n {
				if a.batch == nil {
					// The engine's own admission: once its owner's
					// Settle finds it gone and returns, the engine
					// reuses its memory, so the sweep works on a copy
					// taken while the owner cannot have returned yet.
					a.adm = a.adm.Detached()
				}
				due = append(due, a)
				delete(o.open, id)
			}
		}
		o.mu.Unlock()
	}
	var res sluice.SweepResult
	out := make([]Expired, 0, len(due))
	for _, o := range due {
		a := o.adm
		e := Expired{Batch: o.batch, Actual: make([]int64, len(a.Charges))}
		for i := range a.Charges {
			ch := &a.Charges[i]
			e.Actual[i] = ch.Amount
			if ch.Kind == inproc.Budget {
				if ch.Release {
					e.Actual[i] = 0
					res.Released++
				} else {
					res.Charged++
				}
			}
		}
		var p plan
		s.plan(&p, a)
		s.lock(&p.lockSet)
		s.applyLocked(n, a, &p, e.Actual)
		s.unlock(&p.lockSet)
		if e.Batch == nil {
			e.Batch = batchOf(a)
		}
		res.Reservations++
		out = append(out, e)
	}
	return out, res
}

// batchOf describes an admission of AdmitLocal as a sluice.Batch.
func batchOf(a *inproc.Admission) *sluice.Batch {
	b := &sluice.Batch{ID: a.ID, Deadline: time.Unix(0, a.Deadline), Charges: make([]sluice.Charge, len(a.Charges))}
	for i := range a.Charges {
		ch := &a.Charges[i]
		c := &b.Charges[i]
		c.Key = sluice.CounterKey{Rule: ch.Rule, Subject: a.SubjectOf(ch), Period: ch.Period}
		c.Kind, c.Limit, c.Burst, c.Window = sluice.Kind(ch.Kind.String()), ch.Limit, ch.Burst, time.Duration(ch.Window)
		c.Amount, c.Shadow = ch.Amount, ch.Shadow
		c.OnExpiry = sluice.ExpiryCharge
		if ch.Release {
			c.OnExpiry = sluice.ExpiryRelease
		}
		if ch.PeriodEnd != 0 {
			c.PeriodEnd = time.Unix(0, ch.PeriodEnd)
		}
	}
	return b
}

// maybeEvict runs the eviction scan a locked shard owes: EvictScan
// subjects for each slot it made since the last scan, and EvictScan more
// every EvictEvery admissions when that is set. The subjects that arrive
// pay for the eviction: an admission to counters that exist scans nothing,
// so a store of a million subjects admits to them without an occasional
// scan of cold slots, and with two subjects scanned per slot made the
// cursor passes every subject before the shard doubles, so idle counters
// never take more than about as much room again as the live ones.
func (s *Store) maybeEvict(sh *shard, now int64) {
	n := int(sh.made) * s.evictScan
	sh.made = 0
	if s.evictEvery > 0 {
		if sh.ops++; int(sh.ops) >= s.evictEvery {
			sh.ops = 0
			n += s.evictScan
		}
	}
	if n > 0 {
		sh.evictScan(n, now, s.evictIdle)
	}
}

// evictChunk is how many table entries evictAll examines under one hold of
// a shard's lock: a sweep over a million subjects then never holds an
// admission up for longer than a few hundred slot reads.
const evictChunk = 256

// evictAll drops the idle counters of every subject, a chunk of each shard
// at a time.
func (s *Store) evictAll(now int64) {
	for i := range s.shards {
		sh := &s.shards[i].shard
		for from := 0; ; {
			sh.mu.Lock()
			from = sh.evictRange(from, evictChunk, now, s.evictIdle)
			sh.mu.Unlock()
			if from < 0 {
				break
			}
		}
	}
}
