package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// plan is a batch's keys, buckets and slot groups.
type plan struct {
	keys    []string
	buckets []bucket
	groups  []group
	member  string

	// Room for the usual batch, so that planning allocates once.
	keysArr    [4]string
	bucketsArr [4]bucket
	groupsArr  [2]group
	idxArr     [4]int
}

// group is the charges of a batch whose keys share a hash slot: one script.
type group struct {
	idx  []int
	slot int
	tag  string
	// global groups hold the counters of rules spanning tenants; they are
	// admitted last.
	global bool
	// indexed groups hold budget charges, and so a reservation record
	// (which also lists the group's leases for the sweep to free).
	indexed bool
	// counts is set on the first indexed group, whose record the sweep
	// counts as the batch's reservation.
	counts bool
}

func (s *Store) plan(b *sluice.Batch) (*plan, error) {
	n := len(b.Charges)
	p := &plan{member: s.member(b.ID)}
	if n <= len(p.keysArr) {
		p.keys, p.buckets = p.keysArr[:n], p.bucketsArr[:n]
	} else {
		p.keys, p.buckets = make([]string, n), make([]bucket, n)
	}
	p.groups = p.groupsArr[:0]
	for i := range b.Charges {
		c := &b.Charges[i]
		var err error
		if c.Kind == sluice.KindRate {
			p.buckets[i], err = bucketOf(c)
		} else {
			err = checkCharge(c)
		}
		if err != nil {
			return nil, err
		}
		k := s.keyOf(c)
		p.keys[i] = k.key
		slot, tag := k.slot, k.tag
		gi := -1
		for j := range p.groups {
			if p.groups[j].slot == slot {
				gi = j
				break
			}
		}
		if gi < 0 {
			g := group{slot: slot, tag: tag, global: tag == globalTag}
			if len(p.groups) == 0 {
				g.idx = p.idxArr[:0]
			}
			p.groups = append(p.groups, g)
			gi = len(p.groups) - 1
		}
		g := &p.groups[gi]
		g.idx = append(g.idx, i)
		if c.Kind == sluice.KindBudget {
			g.indexed = true
		}
	}
	if len(p.groups) > 1 {
		// Tenant slots first, the global slot last, otherwise in the order
		// of the batch's charges.
		ordered := make([]group, 0, len(p.groups))
		for _, global := range []bool{false, true} {
			for _, g := range p.groups {
				if g.global == global {
					ordered = append(ordered, g)
				}
			}
		}
		p.groups = ordered
	}
	for j := range p.groups {
		if p.groups[j].indexed {
			p.groups[j].counts = true
			break
		}
	}
	return p, nil
}

// Admit checks every charge of b and applies all of them or none (see the
// package documentation for batches spanning Cluster slots).
func (s *Store) Admit(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p, err := s.plan(&b)
	if err != nil {
		return false, fmt.Errorf("redisstore: admit: %w", err)
	}
	local := s.localNow(now)
	if s.deny != nil && s.deny.refuse(&b, results, p.keys, local) {
		s.denyHits.Add(1)
		return false, nil
	}
	deadline := time.Now().Add(s.timeout)
	if len(p.groups) > 1 {
		s.split.Add(1)
	}
	for gi := range p.groups {
		ok, serverNow, err := s.runAdmit(ctx, deadline, opAdmit, now, &b, results, p, &p.groups[gi])
		if err != nil {
			s.compensate(ctx, now, &b, p, p.groups[:gi])
			return false, fmt.Errorf("redisstore: admit: %w", err)
		}
		if ok {
			continue
		}
		s.compensate(ctx, now, &b, p, p.groups[:gi])
		// Write the results of the slots not reached, so that the refusal
		// names the deciding rule (a budget wins over a rate).
		for gj := gi + 1; gj < len(p.groups); gj++ {
			if _, _, err := s.runAdmit(ctx, deadline, opCheck, now, &b, results, p, &p.groups[gj]); err != nil {
				for _, i := range p.groups[gj].idx {
					results[i] = sluice.ChargeResult{Allowed: true}
				}
			}
		}
		if s.deny != nil {
			s.deny.remember(&b, results, p.keys, local, time.UnixMicro(serverNow))
		}
		return false, nil
	}
	return true, nil
}

// compensate releases the groups admitted before a later one refused.
func (s *Store) compensate(ctx context.Context, now time.Time, b *sluice.Batch, p *plan, groups []group) {
	if len(groups) == 0 {
		return
	}
	// The admission's context may be spent; the release gets its own
	// timeout so that it still runs.
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(s.timeout)
	for gi := range groups {
		s.compensations.Add(1)
		// A failed release leaves leases to expire and budget
		// reservations to the sweep.
		_ = s.settleGroup(ctx, deadline, now, b, p, &groups[gi], true)
	}
}

// Peek writes what each of b's charges would find, without charging.
func (s *Store) Peek(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) error {
	p, err := s.plan(&b)
	if err != nil {
		return fmt.Errorf("redisstore: peek: %w", err)
	}
	deadline := time.Now().Add(s.timeout)
	for gi := range p.groups {
		if _, _, err := s.runAdmit(ctx, deadline, opPeek, now, &b, results, p, &p.groups[gi]); err != nil {
			return fmt.Errorf("redisstore: peek: %w", err)
		}
	}
	return nil
}

// runAdmit runs an admission, check or peek of one group and writes its
// charges' results. It returns whether the group was admitted and the
// script's now (µs).
func (s *Store) runAdmit(ctx context.Context, deadline time.Time, typ byte, now time.Time, b *sluice.Batch, results []sluice.ChargeResult, p *plan, g *group) (bool, int64, error) {
	if len(g.idx) >= maxCharges {
		return false, 0, fmt.Errorf("a batch of %d charges in one slot is more than %d", len(g.idx), maxCharges)
	}
	o := s.buildAdmit(typ, now, b, p, g)
	var giveUp int64
	if typ == opAdmit {
		// The caller waits until deadline, or its context's deadline if
		// sooner: past that, in the server's clock, the script refuses.
		waitsUntil := deadline
		if d, ok := ctx.Deadline(); ok && d.Before(waitsUntil) {
			waitsUntil = d
		}
		giveUp = s.serverTime(g.slot, waitsUntil)
		setNum(o.blob, giveUpAt, giveUp)
	}
	if err := s.do(ctx, deadline, g.slot, o); err != nil {
		if typ == opAdmit && o.sent && mayHaveRun(err) {
			s.cancelLater(now, b, p, g, giveUp)
		}
		return false, 0, err
	}
	admitted, err := decodeAdmit(o.result, b, results, p, g)
	return admitted, o.now, err
}

// buildAdmit encodes an admission, check or peek of one group.
func (s *Store) buildAdmit(typ byte, now time.Time, b *sluice.Batch, p *plan, g *group) *op {
	o := &op{typ: typ, keys: make([]string, 0, len(g.idx)+1), pinned: now.UnixMicro()}
	rec, due := "", 0
	if typ == opAdmit && g.indexed {
		rec, due = s.record(b, p, g), len(g.idx)+1
	}
	o.blob = opBlob(typ, b.Deadline, due, 0, p.member, len(g.idx))
	o.n = len(g.idx)
	for k, i := range g.idx {
		c := &b.Charges[i]
		o.keys = append(o.keys, p.keys[i])
		amount := c.Amount
		if typ == opPeek {
			amount = 0
		}
		switch c.Kind {
		case sluice.KindRate:
			bk := p.buckets[i]
			// A rate's limit is in its bucket (burst, W, L).
			o.blob = appendCharge(o.blob, k+1, kindRate, c.Shadow, amount, 0, bk.burst, bk.w, bk.l)
		case sluice.KindBudget:
			o.blob = appendCharge(o.blob, k+1, kindBudget, c.Shadow, amount, c.Limit, ceilMicro(c.PeriodEnd), 0, 0)
		default:
			o.blob = appendCharge(o.blob, k+1, kindConcurrency, c.Shadow, amount, c.Limit, 0, 0, 0)
		}
	}
	o.blob = endBlob(o.blob, rec)
	if rec != "" {
		o.keys = append(o.keys, s.dueKey(g.slot))
	}
	return o
}

// resultOf is the result of charge c from a script's figures: allowed,
// remaining, used, retry after (µs, -1 for never), reset (µs, 0 for none).
func resultOf(c *sluice.Charge, v []int64) sluice.ChargeResult {
	r := sluice.ChargeResult{Allowed: v[0] == 1, Remaining: v[1], Used: v[2]}
	if !r.Allowed {
		if v[3] < 0 {
			r.RetryAfter = time.Duration(1 << 62)
		} else {
			r.RetryAfter = time.Duration(v[3]) * time.Microsecond
		}
	}
	switch {
	case c.Kind == sluice.KindBudget:
		r.ResetAt = c.PeriodEnd
	case v[4] != 0:
		r.ResetAt = time.UnixMicro(v[4])
	}
	return r
}

// localNow is the time by which the deny cache's entries expire.
func (s *Store) localNow(now time.Time) time.Time {
	if s.pinTime {
		return now
	}
	return time.Now()
}

// ceilMicro returns t in Unix microseconds, rounded up.
func ceilMicro(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Nanosecond()%1000 != 0 {
		us++
	}
	return us
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
