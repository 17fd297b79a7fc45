package sluice

import "strings"

// SweptReservation is a reservation the sweep charged at its deadline, as
// the Limiter's policy reads its counters: the attributes their subjects
// name and the amount its budgets were charged per metric.
type SweptReservation struct {
	// Identity holds the attributes the charges' subjects name (a
	// workspace, team, user or tag within its Org); the others are empty.
	// Tags holds the tag of a rule on "tag", when there is one.
	Identity Identity
	// Charged is, per metric, the largest amount a budget charge of that
	// metric was charged (every budget of a metric reserves the same
	// bound of the call, unless its rule reserves a fixed amount).
	Charged map[Metric]int64
	// Known reports whether a charge's rule was found in the policy:
	// a rule changed or removed since the admission leaves its charge
	// unread.
	Known bool
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
