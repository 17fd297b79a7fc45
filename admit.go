package sluice

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"
)

// Admit checks every applicable rule of req and charges all of them in one
// atomic step, or none. It returns a Reservation to settle when the call
// ends, or a refusal: *RateLimitError, *BusyError, *BudgetError,
// *TooLargeError, *StoreError, or the context's error. With req.MaxWait it
// may wait for rate and concurrency rules.
func (l *Limiter) Admit(ctx context.Context, req Request) (*Reservation, error) {
	if err := cmp.Or(ctx.Err(), req.Max.validate(), req.Expected.validate()); err != nil {
		return nil, err
	}
	r := &Reservation{l: l, id: l.nextID.Add(1)}
	now := l.clock.Now()
	if err := l.build(l.policy.Load(), &req, now, r, true); err != nil {
		l.refused.Add(1)
		if tl, ok := err.(*TooLargeError); ok {
			tl.Result = l.tooLargeRoom(ctx, &req, now, tl.Rule)
		}
		return nil, err
	}
	if req.MaxWait > 0 && l.hooks.wait != nil {
		return l.hooks.wait(ctx, req, r, now)
	}
	if err := l.try(ctx, &req, r, now); err != nil {
		l.refused.Add(1)
		return nil, err
	}
	return r, nil
}

// try runs one admission attempt at now.
func (l *Limiter) try(ctx context.Context, req *Request, r *Reservation, now time.Time) error {
	expiry := cmp.Or(max(req.Timeout, 0), l.defaultTimeout) + l.expirySlack
	if expiry < 0 {
		expiry = math.MaxInt64
	}
	r.admittedAt, r.expiry = now, expiry
	r.deadline = now.Add(expiry)
	if l.hooks.leaseDeadline != nil {
		r.deadline = l.hooks.leaseDeadline(now, r.deadline)
	}
	if len(r.charges.in) == 0 {
		l.admitted.Add(1)
		return nil
	}
	if l.hooks.held != nil {
		if err := l.hooks.held(&r.charges, req.Identity.Model, now); err != nil {
			return err
		}
	}
	var ok bool
	var err error
	if r.classes && l.hooks.admitClasses != nil {
		ok, err = l.hooks.admitClasses(ctx, now, r)
	} else {
		ok, err = l.store.Admit(ctx, now, r.batch(), r.charges.out)
	}
	if err != nil {
		if signal, ok := err.(*StoreError); ok {
			// The refusal's demand signal failed (see hooks.admitClasses).
			return signal
		}
		// When every enforced charge's rule says on_store_error: open:
		// admit, charge nothing, and say so, naming the rules that let it
		// through.
		for i, c := range r.charges.origins {
			if r.charges.in[i].Shadow {
				continue
			}
			if c.rule.OnStoreError != StoreErrorOpen {
				r.failedOpenRules = nil
				return &StoreError{Op: "admit", Err: err}
			}
			r.failedOpenRules = append(r.failedOpenRules, c.rule.Name)
		}
		r.charges = charges{}
		r.failedOpen = true
		l.admitted.Add(1)
		l.failedOpen.Add(1)
		return nil
	}
	inZones(&r.charges)
	if !ok {
		return l.refusal(&r.charges, now)
	}
	for _, admitted := range l.hooks.admitted {
		admitted(r, req.Identity.Key, req.Turn, now)
	}
	l.admitted.Add(1)
	return nil
}

// build sets r's charges: one per applicable rule and subject. Without
// checkFit, a charge too large for its rule is kept rather than refused
// (to look at a subject's limits).
func (l *Limiter) build(p *compiledPolicy, req *Request, now time.Time, r *Reservation, checkFit bool) error {
	cs := charges{r.inline[:0], r.inlineResults[:0], r.inlineOrigins[:0]}
	r.classes = false
	id := &req.Identity
	for _, i := range p.candidatesFor(id.Org) {
		rule := p.rules[i]
		if !rule.matches(id) {
			continue
		}
		limit, burst, source := p.effective(rule, id, now, l.hooks.providerLimit)
		// A cache hit holds no place under a concurrency rule, nor a call
		// in flight, whose connection holds the lease.
		if limit == 0 || rule.hasTag && len(id.Tags) == 0 || rule.hasSession && id.Session == "" ||
			(req.CacheHit || req.InFlight) && rule.Kind == KindConcurrency {
			continue
		}
		if checkFit && !req.usesMetric(rule) {
			continue
		}
		c := cs.add(rule.charge, origin{rule: rule, source: source})
		c.Limit, c.Burst = limit, burst
		if rule.amountOfRequest {
			// What the rule reserves: the bound, or the expected usage
			// with ReserveEstimate when the request gives one.
			u := &req.Max
			if rule.Reserve == ReserveEstimate && !req.Expected.IsZero() {
				u = &req.Expected
			}
			c.Amount = u.amountOf(rule.metric)
		}
		if req.CacheHit && rule.metric != MetricRequests {
			c.Amount = cacheHitAmount(rule, &req.Max)
		}
		// The most the rule could ever admit: a bucket's capacity (a
		// class's share of it), a budget's limit; concurrency charges one.
		most := c.BurstOrLimit()
		if rule.classes != nil {
			most = rule.classes.classCharge(c, id.Class)
			r.classes = true
		}
		if rule.Kind == KindBudget {
			most = limit
			start, end := PeriodBounds(rule.Period, now, rule.location)
			c.Key.Period, c.PeriodEnd = start.Unix(), end
		}
		if checkFit && !c.Shadow && rule.Kind != KindConcurrency && c.Amount > most {
			return &TooLargeError{Rule: rule.Name, Subject: rule.Subject, Metric: rule.metric, Estimate: c.Amount, Limit: most, Source: source.name(rule)}
		}
		if !rule.hasTag {
			c.Key.Subject = subjectValue(rule, id, "", l.serverID)
			for _, charging := range l.hooks.charging {
				charging(c, id.Key, req.Turn, now)
			}
			continue
		}
		// One charge per distinct tag.
		first := len(cs.in) - 1
		for i, tag := range id.Tags {
			if slices.Contains(id.Tags[:i], tag) {
				continue
			}
			if i > 0 {
				cs.add(cs.in[first], cs.origins[first])
			}
			cs.in[len(cs.in)-1].Key.Subject = subjectValue(rule, id, tag, l.serverID)
		}
	}
	r.charges = cs
	return nil
}

// cacheHitAmount is what rule charges a cache hit replaying a call that
// used orig (see Rule.CacheHits).
func cacheHitAmount(rule *compiledRule, orig *Usage) int64 {
	switch rule.CacheHits {
	case CacheHitsNone:
		return 0
	case CacheHitsFull:
		return orig.amountOf(rule.metric)
	}
	return 1
}

// refusal builds the error for a refused admission decided at now: a
// budget wins over a rate; among rates and concurrency, the longest wait.
func (l *Limiter) refusal(cs *charges, now time.Time) error {
	var budget, wait charge
	for i := range cs.in {
		c := cs.at(i)
		if c.Allowed || c.Shadow {
			continue
		}
		if c.Kind == KindBudget {
			c.RetryAfter = ceilMillisecond(c.RetryAfter)
			if budget.Charge == nil || c.ResetAt.After(budget.ResetAt) {
				budget = c
			}
			continue
		}
		// A busy refusal's hint is capped, and its reset is when the hint
		// ends: the earliest lease's expiry (a call's deadline) is no time
		// to come back.
		if hint := cmp.Or(c.rule.BusyRetryAfter, l.busyRetryAfter); c.Kind == KindConcurrency && c.RetryAfter > hint {
			c.ResetAt = c.ResetAt.Add(hint - c.RetryAfter)
			c.RetryAfter = hint
		}
		c.RetryAfter = ceilMillisecond(c.RetryAfter) + l.retryBuffer
		if wait.Charge == nil || c.RetryAfter > wait.RetryAfter {
			wait = c
		}
	}
	if budget.Charge == nil && wait.Charge == nil {
		return &StoreError{Op: "admit", Err: errors.New("store refused a batch without saying which charge")}
	}
	room := resultOf(cs)
	if budget.Charge != nil {
		return &BudgetError{refusalOf(budget, &room)}
	}
	ref := refusalOf(wait, &room)
	ref.RetryAt = now.Add(ref.RetryAfter)
	if wait.Kind == KindConcurrency {
		return &BusyError{ref}
	}
	return &RateLimitError{ref}
}

func refusalOf(c charge, room *Result) Refusal {
	rule := c.rule
	ref := Refusal{
		Rule: rule.Name, Subject: rule.Subject, Kind: rule.Kind, Metric: rule.metric,
		Limit: c.Limit, Used: c.Used, Remaining: c.Remaining, Requested: c.Amount,
		Window: rule.Window, Period: rule.Period, Source: c.source.name(rule),
		RetryAfter: c.RetryAfter, ResetAt: c.ResetAt, Result: room,
	}
	if c.class != 0 {
		ref.Class = rule.classes.shareOf(c)
	}
	return ref
}

// ceilMillisecond rounds d up to the next millisecond, never down.
func ceilMillisecond(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}
