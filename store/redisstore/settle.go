package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Settle applies each charge's Actual in place of its Amount and frees the
// batch's leases, once: a group of charges the sweep already settled is left
// alone.
func (s *Store) Settle(ctx context.Context, now time.Time, b *sluice.Batch) error {
	p, err := s.plan(b)
	if err != nil {
		return fmt.Errorf("redisstore: settle: %w", err)
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	for gi := range p.groups {
		if err := s.settleGroup(ctx, now, b, p, &p.groups[gi], false); err != nil {
			return fmt.Errorf("redisstore: settle: %w", err)
		}
	}
	return nil
}

// maxActual keeps a reported usage within what HINCRBY adds without
// overflow.
const maxActual = 1 << 62

// settleGroup runs the settle script on one group, with each charge's Actual
// or, when release is set, with nothing used.
func (s *Store) settleGroup(ctx context.Context, now time.Time, b *sluice.Batch, p *plan, g *group, release bool) error {
	keys := make([]string, 0, len(g.idx)+2)
	args := make([]string, 0, 3+7*len(g.idx))
	for _, i := range g.idx {
		keys = append(keys, p.keys[i])
	}
	keys = append(keys, s.recordKey(g.tag, p.member), s.dueKey(g.slot))
	hasRecord := "0"
	if g.indexed {
		hasRecord = "1"
	}
	args = append(args, s.scriptNow(now), p.member, hasRecord)
	changed := g.indexed
	for _, i := range g.idx {
		c := &b.Charges[i]
		actual := min(max(c.Actual, 0), maxActual)
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
			if delta != 0 {
				changed = true
			}
			args = append(args, kindRate, itoa(c.Amount), itoa(delta), itoa(bk.burst), itoa(bk.w), itoa(bk.l), "0")
		case sluice.KindBudget:
			args = append(args, kindBudget, itoa(c.Amount), itoa(actual), itoa(ceilMicro(c.PeriodEnd)), "0", "0", "0")
		default:
			args = append(args, kindConcurrency, "0", "0", "0", "0", "0", "0")
		}
	}
	if !changed {
		return nil
	}
	return settleScript.Exec(ctx, s.client, keys, args).Error()
}

// sweepBatch is the most records one sweep script settles.
const sweepBatch = 256

// Sweep settles the reservations past their deadline. Several replicas may
// sweep at the same time: each reservation is settled once.
func (s *Store) Sweep(ctx context.Context, now time.Time) (sluice.SweepResult, error) {
	var res sluice.SweepResult
	if !s.cluster {
		err := s.sweepIndex(ctx, now, s.dueKey(0), &res)
		return res, err
	}
	due, err := s.dueSlots(ctx)
	if err != nil {
		return res, fmt.Errorf("redisstore: sweep: %w", err)
	}
	for _, slot := range due {
		if err := s.sweepIndex(ctx, now, s.dueKey(slot), &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// sweepIndex settles the due records of one deadline index.
func (s *Store) sweepIndex(ctx context.Context, now time.Time, due string, res *sluice.SweepResult) error {
	for {
		cctx, cancel := s.call(ctx)
		v, err := sweepScript.Exec(cctx, s.client, []string{due}, []string{s.scriptNow(now), itoa(sweepBatch)}).AsIntSlice()
		cancel()
		if err != nil {
			return fmt.Errorf("redisstore: sweep: %w", err)
		}
		if len(v) != 4 {
			return fmt.Errorf("redisstore: sweep: script returned %d values", len(v))
		}
		res.Reservations += int(v[0])
		res.Charged += int(v[1])
		res.Released += int(v[2])
		if v[3] < sweepBatch {
			return nil
		}
	}
}
