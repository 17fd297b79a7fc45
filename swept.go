package sluice

import (
	"context"
	"strings"
	"time"
)

// installSweptReports makes Sweep tell Options.OnSwept what it settled,
// when OnSwept is set and the store can describe it (a SweepReporter), so
// that what the sweep charged reaches a ledger.
func installSweptReports(l *Limiter, opts *Options) {
	reporter, ok := opts.Store.(SweepReporter)
	onSwept := opts.OnSwept
	if !ok || onSwept == nil {
		return
	}
	l.hooks.sweep = func(ctx context.Context, now time.Time) (SweepResult, error) {
		res, expired, err := reporter.SweepReport(ctx, now)
		for _, s := range sweptOf(l.policy.Load(), expired) {
			onSwept(s)
		}
		return res, err
	}
}

// sweptOf reads what a store's sweep expired under policy p.
func sweptOf(p *compiledPolicy, expired []Batch) []SweptReservation {
	if len(expired) == 0 {
		return nil
	}
	byID := make(map[uint64]*compiledRule, len(p.rules))
	for _, r := range p.rules {
		byID[r.id] = r
	}
	out := make([]SweptReservation, 0, len(expired))
	for _, e := range expired {
		s := SweptReservation{Charged: map[Metric]int64{}}
		for _, c := range e.Charges {
			r := byID[c.Key.Rule]
			if r == nil {
				continue
			}
			s.Known = true
			s.Identity.readSubject(r.attrs, c.Key.Subject)
			if c.Kind == KindBudget && c.Actual > s.Charged[r.metric] {
				s.Charged[r.metric] = c.Actual
			}
		}
		out = append(out, s)
	}
	return out
}

// readSubject sets the attributes attrs of id from a counter's subject, the
// inverse of subjectValue: a workspace, team, user or tag qualified by its
// org, a session by its key.
func (id *Identity) readSubject(attrs []attribute, subject string) {
	parts := []string{subject}
	if len(attrs) > 1 {
		parts = strings.Split(subject, subjectSeparator)
	}
	if len(parts) != len(attrs) {
		return
	}
	for i, a := range attrs {
		v := parts[i]
		switch a {
		case attrWorkspace, attrTeam, attrUser, attrTag:
			org, bare, qualified := strings.Cut(v, qualifierSeparator)
			if qualified {
				id.Org, v = org, bare
			} else if id.Org == "" {
				id.Org = DefaultOrg
			}
		case attrSession:
			if key, session, ok := strings.Cut(v, qualifierSeparator); ok {
				id.Key, v = key, session
			}
		}
		switch a {
		case attrOrg:
			id.Org = v
		case attrWorkspace:
			id.Workspace = v
		case attrTeam:
			id.Team = v
		case attrUser:
			id.User = v
		case attrKey:
			id.Key = v
		case attrIP:
			id.IP = v
		case attrSession:
			id.Session = v
		case attrModel:
			id.Model = v
		case attrRoute:
			id.Route = v
		case attrTier:
			id.Tier = v
		case attrTag:
			id.Tags = []string{v}
		}
	}
}
