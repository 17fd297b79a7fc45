package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/counter"
)

// Settle applies each charge's Actual in place of its Amount and frees the
// batch's leases, once: a group of charges the sweep already settled is left
// alone.
func (s *Store) Settle(ctx context.Context, now time.Time, b sluice.Batch) error {
	p, err := s.plan(&b)
	if err != nil {
		return fmt.Errorf("redisstore: settle: %w", err)
	}
	deadline := time.Now().Add(s.timeout)
	for gi := range p.groups {
		if err := s.settleGroup(ctx, deadline, now, &b, p, &p.groups[gi], false); err != nil {
			return fmt.Errorf("redisstore: settle: %w", err)
		}
	}
	return nil
}

// settleGroup settles one group with each charge's Actual or, when release
// is set, with nothing used.
func (s *Store) settleGroup(ctx context.Context, deadline time.Time, now time.Time, b *sluice.Batch, p *plan, g *group, release bool) error {
	if len(g.idx) >= maxCharges {
		return fmt.Errorf("a batch of %d charges in one slot is more than %d", len(g.idx), maxCharges)
	}
	o := s.buildSettle(now, b, p, g, release)
	if o == nil {
		return nil
	}
	return s.do(ctx, deadline, g.slot, o)
}

// buildSettle encodes the settlement of one group, or returns nil when it
// would change nothing.
func (s *Store) buildSettle(now time.Time, b *sluice.Batch, p *plan, g *group, release bool) *op {
	o := &op{typ: opSettle, keys: make([]string, 0, len(g.idx)+1), pinned: now.UnixMicro()}
	rec := ""
	if g.indexed {
		rec = s.record(b, p, g)
	}
	// The deadline index's reference is set once the keys are known.
	o.blob = opBlob(opSettle, b.Deadline, 0, 0, p.member, len(g.idx))
	changed := g.indexed
	for _, i := range g.idx {
		c := &b.Charges[i]
		// Usage is summed with min(.., ceiling) in the script: an actual up
		// to the ceiling (an exact double) saturates the budget exactly.
		actual := counter.Clamp(c.Actual)
		if release {
			actual = 0
		}
		switch c.Kind {
		case sluice.KindRate:
			bk := p.buckets[i]
			// Beyond one burst either way the bucket is pinned at full or at
			// its debt bound, so the delta is clamped there.
			bound := 2*bk.burst + 1
			delta := min(max(actual-c.Amount, -bound), bound)
			if delta == 0 {
				// Nothing to move: the charge is left out.
				continue
			}
			changed = true
			o.keys = append(o.keys, p.keys[i])
			o.blob = appendCharge(o.blob, len(o.keys), kindRate, false, c.Amount, delta, bk.burst, bk.w, bk.l)
		case sluice.KindBudget:
			o.keys = append(o.keys, p.keys[i])
			o.blob = appendCharge(o.blob, len(o.keys), kindBudget, false, c.Amount, actual, ceilMicro(c.PeriodEnd), 0, 0)
		default:
			changed = true
			o.keys = append(o.keys, p.keys[i])
			o.blob = appendCharge(o.blob, len(o.keys), kindConcurrency, false, 0, 0, 0, 0, 0)
		}
		o.n++
	}
	o.blob = endBlob(o.blob, rec)
	if !changed {
		return nil
	}
	if rec != "" {
		o.keys = append(o.keys, s.dueKey(g.slot))
		setNum(o.blob, dueRefAt, int64(len(o.keys)))
	}
	return o
}

// sweepBatch is the most records one sweep script settles.
const sweepBatch = 256

// Sweep settles the reservations past their deadline. Several replicas may
// sweep at the same time: each reservation is settled once.
func (s *Store) Sweep(ctx context.Context, now time.Time) (sluice.SweepResult, error) {
	res, _, err := s.sweep(ctx, now, false)
	return res, err
}

// SweepReport is Sweep, and tells what it settled.
func (s *Store) SweepReport(ctx context.Context, now time.Time) (sluice.SweepResult, []sluice.Batch, error) {
	return s.sweep(ctx, now, true)
}

func (s *Store) sweep(ctx context.Context, now time.Time, report bool) (sluice.SweepResult, []sluice.Batch, error) {
	var res sluice.SweepResult
	var expired []sluice.Batch
	if !s.cluster {
		err := s.sweepIndex(ctx, now, s.dueKey(0), &res, report, &expired)
		return res, expired, err
	}
	due, err := s.dueSlots(ctx)
	if err != nil {
		return res, expired, fmt.Errorf("redisstore: sweep: %w", err)
	}
	for _, slot := range due {
		if err := s.sweepIndex(ctx, now, s.dueKey(slot), &res, report, &expired); err != nil {
			return res, expired, err
		}
	}
	return res, expired, nil
}

// sweepIndex settles the due records of one deadline index; with report,
// it adds what it settled to expired.
func (s *Store) sweepIndex(ctx context.Context, now time.Time, due string, res *sluice.SweepResult, report bool, expired *[]sluice.Batch) error {
	flag := "0"
	if report {
		flag = "1"
	}
	for {
		cctx, cancel := s.call(ctx)
		reply, err := sweepScript.Exec(cctx, s.client, []string{due}, []string{s.scriptNow(now), itoa(sweepBatch), flag}).ToArray()
		cancel()
		if err == nil && len(reply) < 4 {
			err = fmt.Errorf("script returned %d values", len(reply))
		}
		var v [4]int64
		for i := range v {
			if err == nil {
				v[i], err = reply[i].AsInt64()
			}
		}
		if err != nil {
			return fmt.Errorf("redisstore: sweep: %w", err)
		}
		if len(reply) < 5 {
			return fmt.Errorf("redisstore: sweep: script returned %d values", len(reply))
		}
		s.logRepaired(reply[5:])
		res.Reservations += int(v[0])
		res.Charged += int(v[1])
		res.Released += int(v[2])
		if report {
			if err := s.readSettled(reply[4], expired); err != nil {
				return fmt.Errorf("redisstore: sweep: %w", err)
			}
		}
		if v[3] < sweepBatch {
			return nil
		}
	}
}

// readSettled adds the records a sweep reported to expired.
func (s *Store) readSettled(m rueidis.RedisMessage, expired *[]sluice.Batch) error {
	recs, err := m.ToArray()
	if err != nil {
		return err
	}
	for _, rec := range recs {
		parts, err := rec.AsStrSlice()
		if err != nil {
			return err
		}
		var e sluice.Batch
		for i := 0; i+1 < len(parts); i += 2 {
			key, kind, ok := s.parseCounterKey(parts[i])
			if !ok {
				continue // not a key this store names: nothing to tell of it
			}
			charged, err := strconv.ParseInt(parts[i+1], 10, 64)
			if err != nil {
				return fmt.Errorf("charge of %q: %w", parts[i], err)
			}
			e.Charges = append(e.Charges, sluice.Charge{Key: key, Kind: kind, Actual: charged})
		}
		*expired = append(*expired, e)
	}
	return nil
}

// logRepaired warns once for each budget key a script found out of bounds
// and repaired (see budget_load in prelude.lua).
func (s *Store) logRepaired(keys []rueidis.RedisMessage) {
	for _, m := range keys {
		key, _ := m.ToString()
		s.log.Warn("redisstore: budget counter out of bounds, repaired: usage past 2^53, negative or fractional is taken as spent until its period ends",
			"key", key)
	}
}
