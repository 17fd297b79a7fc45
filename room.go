package sluice

import (
	"cmp"
	"context"
	"time"
)

// The room of an identity's limits: what an admission reports, and what
// Room and Effective read without charging.

// Result describes an admission, for the response headers.
type Result struct {
	// Headroom is the applicable rule with the least room (its Rule empty
	// when no rule applied): the X-RateLimit and RateLimit fields.
	Headroom
	// Warnings lists the budget thresholds and soft limits reached.
	Warnings []Warning
	// Shadowed names the shadow rules that would have refused.
	Shadowed []string
	// FailedOpen is set when the store could not answer and the request
	// was admitted uncharged, every rule in play saying
	// on_store_error: open.
	FailedOpen bool
	// FailedOpenRules names the enforced rules of a FailedOpen admission.
	FailedOpenRules []string
	// Classes describes the admission by each class rule: the request's
	// class, its floor and share, and whose share admitted it.
	Classes []ClassShare
	// Requests and Tokens are the applicable rules with the least room
	// among those counting requests, and those counting tokens (input,
	// output or both): what OpenAI's x-ratelimit-*-requests and
	// x-ratelimit-*-tokens headers report. Empty Rule when none applied.
	Requests, Tokens Headroom
}

// ClassShare says how a class rule treated a request: its class, that
// class's floor and share of the capacity, and whose share admitted it.
type ClassShare struct {
	Rule  string
	Class string
	Floor int64
	// Share is the class's own part of Capacity: its floor and its weight's
	// part of what the floors leave.
	Share    int64
	Capacity int64
	// BorrowedFrom names the class whose idle share admitted the request;
	// empty when the class's own share did (or, in a refusal, would have).
	BorrowedFrom string
}

// Headroom is one limit that applies to an identity: its rule, where its
// limit came from, and its room.
type Headroom struct {
	Rule    string
	Kind    Kind
	Subject string
	Metric  Metric
	Limit   int64
	Burst   int64
	// Source is where Limit came from: the rule's own Source, "tier",
	// "override" or LimitFromProvider.
	Source    string
	Mode      Mode
	Used      int64
	Remaining int64
	ResetAt   time.Time
	// Window is the rule's time window: a rate rule's refill window, the
	// length of a budget's current period; zero for concurrency.
	Window time.Duration
}

// Warning is a budget past one of its warning thresholds or its soft limit.
type Warning struct {
	Rule    string
	Subject string
	// Threshold is the fraction of Limit reached; 0 for a soft limit.
	Threshold float64
	Soft      bool
	Used      int64
	Limit     int64
	// ResetAt is the end of the budget's period: a warning names its
	// period by it.
	ResetAt time.Time
}

// Room reads, without charging, the room of every rule that applies to req
// (its Max is neither charged nor checked): the Result to report in the
// header fields of an answer that admits nothing, such as a refusal an
// application or the gateway makes itself. The zero Result when no rule
// applies; a *StoreError when the store does not answer.
func (l *Limiter) Room(ctx context.Context, req Request) (Result, error) {
	cs, err := l.peekRoom(ctx, &req, l.clock.Now())
	if err != nil {
		return Result{}, err
	}
	return resultOf(&cs), nil
}

// Effective lists the limits that apply to id now, each with where it came
// from and its headroom. Rules that match a model or route apply only when
// id names it.
func (l *Limiter) Effective(ctx context.Context, id Identity) ([]Headroom, error) {
	cs, err := l.peekRoom(ctx, &Request{Identity: id}, l.clock.Now())
	if err != nil {
		return nil, err
	}
	out := make([]Headroom, len(cs.in))
	for i := range out {
		out[i] = headroomOf(cs.at(i))
	}
	return out, nil
}

// peekRoom builds the charges of every rule that applies to req at now,
// without checking that they fit, and reads their results from the store
// without charging.
func (l *Limiter) peekRoom(ctx context.Context, req *Request, now time.Time) (charges, error) {
	r := &Reservation{l: l}
	if err := l.build(l.policy.Load(), req, now, r, false); err != nil || len(r.charges.in) == 0 {
		return charges{}, err
	}
	if err := l.store.Peek(ctx, now, r.batch(), r.charges.out); err != nil {
		return charges{}, &StoreError{Op: "peek", Err: err}
	}
	inZones(&r.charges)
	return r.charges, nil
}

// inZones puts each budget's ResetAt in its rule's time zone, as
// PeriodBounds gives it, whatever the store returned.
func inZones(cs *charges) {
	for i := range cs.in {
		if c := cs.at(i); c.Kind == KindBudget && !c.ResetAt.IsZero() {
			c.ResetAt = c.ResetAt.In(c.rule.location)
		}
	}
}

// resultOf is what the charges of an admission, admitted or refused, say
// about its rules' room.
func resultOf(cs *charges) Result {
	var res Result
	var least, leastRequests, leastTokens charge
	var leastRoom, requestsRoom, tokensRoom float64
	for i := range cs.in {
		c := cs.at(i)
		if c.rule.isDemand {
			continue
		}
		if c.Shadow {
			if !c.Allowed {
				res.Shadowed = append(res.Shadowed, c.rule.Name)
			}
			continue
		}
		capacity := c.Limit
		if c.Kind == KindRate {
			capacity = c.BurstOrLimit()
		}
		room := float64(c.Remaining) / float64(capacity)
		if least.Charge == nil || room < leastRoom || room == leastRoom && c.ResetAt.After(least.ResetAt) {
			least, leastRoom = c, room
		}
		switch c.rule.metric {
		case MetricRequests:
			if leastRequests.Charge == nil || room < requestsRoom {
				leastRequests, requestsRoom = c, room
			}
		case MetricTokens, MetricInputTokens, MetricUncachedInputTokens, MetricOutputTokens:
			if leastTokens.Charge == nil || room < tokensRoom {
				leastTokens, tokensRoom = c, room
			}
		}
		if c.class != 0 {
			res.Classes = append(res.Classes, *c.rule.classes.shareOf(c))
		}
		if c.Kind == KindBudget {
			if w, ok := warningOf(c); ok {
				res.Warnings = append(res.Warnings, w)
			}
		}
	}
	res.Headroom, res.Requests, res.Tokens = headroomOf(least), headroomOf(leastRequests), headroomOf(leastTokens)
	return res
}

func headroomOf(c charge) Headroom {
	if c.Charge == nil {
		return Headroom{}
	}
	rule := c.rule
	return Headroom{Rule: rule.Name, Kind: c.Kind, Subject: rule.Subject, Metric: rule.metric, Limit: c.Limit, Burst: c.Burst,
		Source: c.source.name(rule), Mode: cmp.Or(rule.Mode, ModeEnforce), Used: c.Used, Remaining: c.Remaining, ResetAt: c.ResetAt, Window: policyWindow(c)}
}

// warningOf reports the highest warning a budget charge has reached.
func warningOf(c charge) (Warning, bool) {
	rule := c.rule
	w := Warning{Rule: rule.Name, Subject: c.Key.Subject, Used: c.Used, Limit: c.Limit, ResetAt: c.ResetAt}
	found := false
	for _, f := range rule.WarnAt {
		if float64(c.Used) >= f*float64(c.Limit) && f > w.Threshold {
			w.Threshold, found = f, true
		}
	}
	if rule.SoftLimit > 0 && c.Used >= rule.SoftLimit {
		w.Soft, found = true, true
	}
	return w, found
}

// policyWindow is the time window of a charge's rule: a rate rule's refill
// window, a budget's current period (a month is as long as it is); none
// for concurrency.
func policyWindow(c charge) time.Duration {
	switch c.Kind {
	case KindRate:
		return c.Window
	case KindBudget:
		if !c.PeriodEnd.IsZero() {
			return c.PeriodEnd.Sub(time.Unix(c.Key.Period, 0))
		}
	}
	return 0
}

// tooLargeRoom reads, without charging, the room of every rule that
// applies to req, for the header fields of a request that never fits rule:
// those of rule itself, which its body names (the OpenAI fields keep the
// least room among request and token rules); nil when the store does not
// answer (the refusal stands without them).
func (l *Limiter) tooLargeRoom(ctx context.Context, req *Request, now time.Time, rule string) *Result {
	cs, err := l.peekRoom(ctx, req, now)
	if err != nil || len(cs.in) == 0 {
		return nil
	}
	res := resultOf(&cs)
	for i := range cs.in {
		if c := cs.at(i); c.rule.Name == rule && !c.Shadow {
			res.Headroom = headroomOf(c)
			break
		}
	}
	if res.Rule == "" {
		return nil
	}
	return &res
}
