package sluice

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Override changes one rule's limit for one subject: every request whose
// identity has Attribute equal to Value. A nil field inherits the rule's
// value; 0 disables the rule for that subject. An Override with a non-zero
// ExpiresAt stops applying at that instant.
type Override struct {
	// Rule is the name of the rule it changes.
	Rule string
	// Attribute is the identity attribute it keys on: org, workspace, team,
	// user, key, ip or session.
	Attribute string
	Value     string
	// Org is the org of a workspace, team or user Value (empty means
	// DefaultOrg): an override of workspace "shared" in one org does not
	// change the limits of another org's workspace "shared".
	Org       string
	Limit     *int64
	Burst     *int64
	ExpiresAt time.Time
}

// Tier scales the limits of every rule for requests whose identity carries
// its name: a new account starts on a smaller tier and is promoted later.
type Tier struct {
	Name string
	// Percent of each rule's Limit and Burst that applies (100 = unchanged).
	Percent int64
}

// Policy is the complete set of limits a Limiter enforces.
type Policy struct {
	Rules     []Rule
	Overrides []Override
	Tiers     []Tier
}

// compiledRule is a validated rule with its parsed subject and identity.
type compiledRule struct {
	Rule
	id     uint64
	attrs  []attribute
	hasTag bool
	// hasSession: the rule counts per session, and applies only to calls
	// made in one.
	hasSession bool
	metric     Metric
	location   *time.Location

	// charge is the rule's charge as an admission starts it: the limits
	// the rule's own, and the amount when it does not depend on the
	// request (1 for requests and concurrency, ReserveAmount with
	// ReserveFixed; amountOfRequest is set otherwise).
	charge          Charge
	amountOfRequest bool
	// classes are a class rule's classes; nil for other rules. isDemand
	// marks the rule of a class rule's demand markers.
	classes  classRule
	isDemand bool
}

// classRule is what the core asks of a class rule's classes (see Class):
// classCharge turns c, the rule's charge for a request of class (the
// Identity's), into the charge of that class's share, and returns the
// largest charge any share could admit; shareOf describes a charge it
// made.
type classRule interface {
	classCharge(c charge, class string) int64
	shareOf(c charge) *ClassShare
}

// compileRule validates r and prepares it for admissions.
func compileRule(r Rule) (*compiledRule, error) {
	bad := func(field, format string, args ...any) error {
		return &RuleError{Rule: r.Name, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	if r.Name == "" {
		return nil, bad("name", "is empty")
	}
	c := &compiledRule{Rule: r, metric: r.metric(), location: time.UTC}
	switch r.Kind {
	case KindRate, KindConcurrency, KindBudget:
	default:
		return nil, bad("kind", "must be rate, concurrency or budget, not %q", r.Kind)
	}
	attrs, err := parseSubject(r.Subject)
	if err != nil {
		return nil, bad("subject", "%v", err)
	}
	c.attrs = attrs
	c.hasTag = slices.Contains(attrs, attrTag)
	c.hasSession = slices.Contains(attrs, attrSession)
	switch {
	case r.Kind == KindConcurrency && c.metric != MetricConcurrency:
		return nil, bad("metric", "a concurrency rule counts concurrency, not %q", r.Metric)
	case r.Kind != KindConcurrency && c.metric == MetricConcurrency:
		return nil, bad("metric", "concurrency is counted by concurrency rules only")
	case !validMetricName(c.metric):
		return nil, bad("metric", "unknown metric %q (custom metrics use a-z, 0-9 and _)", r.Metric)
	}
	if r.Limit < 0 {
		return nil, bad("limit", "must not be negative (0 disables), got %d", r.Limit)
	}
	if r.MinOutputTokens < 0 {
		return nil, bad("min_output_tokens", "must not be negative")
	}
	if r.BusyRetryAfter < 0 || r.BusyRetryAfter > 0 && r.Kind != KindConcurrency {
		return nil, bad("busy_retry_after", "is for concurrency rules, and must not be negative")
	}
	switch r.Kind {
	case KindRate:
		if r.Window <= 0 {
			return nil, bad("window", "must be positive, got %v", r.Window)
		}
		if r.Burst < 0 {
			return nil, bad("burst", "must not be negative, got %d", r.Burst)
		}
		if burst := cmp.Or(r.Burst, r.Limit); burst > 0 && burst < r.MinOutputTokens {
			return nil, bad("burst", "%d is smaller than one request's minimum (%d)", burst, r.MinOutputTokens)
		}
	case KindBudget:
		switch r.Period {
		case PeriodDay, PeriodWeek, PeriodMonth:
		default:
			return nil, bad("period", "must be day, week or month, not %q", r.Period)
		}
		if r.TimeZone != "" {
			loc, err := time.LoadLocation(r.TimeZone)
			if err != nil {
				return nil, bad("time_zone", "unknown time zone %q", r.TimeZone)
			}
			c.location = loc
		}
		if r.SoftLimit < 0 || (r.Limit > 0 && r.SoftLimit > r.Limit) {
			return nil, bad("soft_limit", "must be between 0 and the limit, got %d", r.SoftLimit)
		}
		for _, f := range r.WarnAt {
			if !(f > 0 && f <= 1) {
				return nil, bad("warn_at", "fractions must be in (0, 1], got %v", f)
			}
		}
	}
	// The choices whose empty value is their default.
	for _, f := range []struct{ field, value, choice, say string }{
		{"reserve", r.Reserve, "worst_case estimate fixed", "worst_case, estimate or fixed"},
		{"on_expiry", string(r.OnExpiry), "charge release", "charge or release"},
		{"on_store_error", string(r.OnStoreError), "closed open", "closed or open"},
		{"mode", string(r.Mode), "enforce shadow", "enforce or shadow"},
		{"fit", r.Fit, "clamp", "clamp or empty"},
		{"cache_hits", string(r.CacheHits), "minimal none full", "minimal, none or full"},
		{"limit_from", r.LimitFrom, LimitFromProvider, "provider or empty"},
	} {
		if f.value != "" && !slices.Contains(strings.Fields(f.choice), f.value) {
			return nil, bad(f.field, "must be %s, not %q", f.say, f.value)
		}
	}
	if r.Reserve == ReserveFixed {
		if r.ReserveAmount <= 0 {
			return nil, bad("reserve_amount", "must be positive with reserve: fixed")
		}
		if capacity := cmp.Or(r.Burst, r.Limit); r.Kind != KindConcurrency && capacity > 0 && r.ReserveAmount > capacity {
			return nil, bad("reserve_amount", "%d is more than the rule could ever admit (%d)", r.ReserveAmount, capacity)
		}
	}
	c.id = fingerprint(&r, c.metric)
	for _, compile := range ruleFeatures { // features.go
		if err := compile(c); err != nil {
			return nil, err
		}
	}
	c.charge = Charge{Key: CounterKey{Rule: c.id}, Kind: r.Kind, Limit: r.Limit, Burst: r.Burst, Window: r.Window,
		OnExpiry: r.OnExpiry, Shadow: r.Mode == ModeShadow}
	switch {
	case c.metric == MetricRequests || c.metric == MetricConcurrency:
		c.charge.Amount = 1
	case r.Reserve == ReserveFixed:
		c.charge.Amount = r.ReserveAmount
	default:
		c.amountOfRequest = true
	}
	return c, nil
}

// fingerprint identifies a rule's counters. It covers what a counter means
// (name, kind, subject, metric, window, period, zone) and not the limit, so
// raising a limit keeps the usage while changing a window or a subject starts
// new counters.
func fingerprint(r *Rule, m Metric) uint64 {
	h := fnv.New64a()
	for _, s := range []string{r.Name, string(r.Kind), r.Subject, string(m),
		strconv.FormatInt(int64(r.Window), 10), string(r.Period), r.TimeZone} {
		h.Write([]byte(s + "\x00"))
	}
	// An org's rule counts apart from the deployment's rule of the same
	// name; a rule without an org keeps the fingerprint it always had.
	if r.Org != "" {
		h.Write([]byte("org\x00" + r.Org))
	}
	// A rule matched to other models counts other calls: its counters start
	// afresh, as they do when its window changes. The order the models are
	// listed in does not matter; a rule without a model match keeps its
	// fingerprint.
	if len(r.Match.Models) > 0 {
		models := slices.Sorted(slices.Values(r.Match.Models))
		h.Write([]byte("\x00models"))
		for _, m := range slices.Compact(models) {
			h.Write([]byte("\x00" + m))
		}
	}
	return h.Sum64()
}

type overrideKey struct {
	attr  attribute
	value string
}

// compiledPolicy is an immutable, validated Policy.
type compiledPolicy struct {
	source Policy
	rules  []*compiledRule
	// byName finds a rule by its org (empty for the deployment's) and
	// name; names holds every rule name, for overrides.
	byName    map[ruleName]*compiledRule
	names     map[string]bool
	overrides map[overrideKey][]*Override
	// overrideAttrs lists the attributes that have overrides, most specific
	// first.
	overrideAttrs []attribute
	tiers         map[string]int64
	// candidates lists the rules an admission looks at: enabled, and
	// with a limit or an override that may give one. Those are the
	// deployment's rules (no Org); orgCandidates holds, for each org with
	// rules of its own, that list with the org's rules added and the
	// deployment rules they replace taken out, so that an admission looks
	// at its own org's rules only, however many orgs have rules.
	candidates    []uint32
	orgCandidates map[string][]uint32
}

// overrideOrder ranks attributes from the most specific.
var overrideOrder = []attribute{attrKey, attrSession, attrUser, attrTeam, attrWorkspace, attrOrg, attrIP}

// maxRules is the most rules a policy holds: the candidates of an
// admission name their rules by a 32-bit index.
const maxRules = 1<<32 - 1

func compilePolicy(p Policy) (*compiledPolicy, error) {
	if int64(len(p.Rules)) > maxRules {
		return nil, fmt.Errorf("sluice: policy: %d rules, at most %d", len(p.Rules), maxRules)
	}
	cp := &compiledPolicy{source: p, byName: map[ruleName]*compiledRule{}, names: map[string]bool{},
		overrides: map[overrideKey][]*Override{}, tiers: map[string]int64{}, orgCandidates: map[string][]uint32{},
		rules: make([]*compiledRule, 0, len(p.Rules)), candidates: make([]uint32, 0, len(p.Rules))}
	for _, r := range p.Rules {
		c, err := compileRule(r)
		if err != nil {
			return nil, err
		}
		if _, dup := cp.byName[ruleName{r.Org, r.Name}]; dup {
			msg := "is used by two rules"
			if r.Org != "" {
				msg += " of org " + strconv.Quote(r.Org)
			}
			return nil, &RuleError{Rule: r.Name, Field: "name", Message: msg}
		}
		cp.byName[ruleName{r.Org, r.Name}] = c
		cp.names[r.Name] = true
		cp.rules = append(cp.rules, c)
	}
	for i := range p.Overrides {
		o := &p.Overrides[i]
		a, ok := attributeNames[o.Attribute]
		if !ok || !slices.Contains(overrideOrder, a) {
			return nil, fmt.Errorf("sluice: override of %q: attribute %q must be one of org, workspace, team, user, key, session, ip", o.Rule, o.Attribute)
		}
		if !cp.names[o.Rule] {
			return nil, fmt.Errorf("sluice: override for %s %q: no rule named %q", o.Attribute, o.Value, o.Rule)
		}
		if (o.Limit != nil && *o.Limit < 0) || (o.Burst != nil && *o.Burst < 0) {
			return nil, fmt.Errorf("sluice: override of %q for %s %q: limits must not be negative", o.Rule, o.Attribute, o.Value)
		}
		k := overrideKey{a, o.Value}
		if a == attrWorkspace || a == attrTeam || a == attrUser {
			k.value = (&Identity{Org: o.Org}).qualifiedValue(o.Value)
		}
		cp.overrides[k] = append(cp.overrides[k], o)
	}
	for _, a := range overrideOrder {
		for k := range cp.overrides {
			if k.attr == a {
				cp.overrideAttrs = append(cp.overrideAttrs, a)
				break
			}
		}
	}
	for _, t := range p.Tiers {
		if t.Name == "" || t.Percent <= 0 {
			return nil, fmt.Errorf("sluice: tier %q: needs a name and a positive percent", t.Name)
		}
		cp.tiers[t.Name] = t.Percent
	}
	candidate := func(r *compiledRule) bool { return !r.Disabled && (r.Limit != 0 || len(cp.overrides) > 0) }
	for i, r := range cp.rules {
		if r.Org == "" && candidate(r) {
			cp.candidates = append(cp.candidates, uint32(i))
		}
	}
	// Each org's list: the deployment's candidates its own rules do not
	// replace (a disabled org rule replaces the deployment's too), then its
	// own candidates.
	for i, r := range cp.rules {
		if r.Org == "" {
			continue
		}
		list, ok := cp.orgCandidates[r.Org]
		if !ok {
			list = slices.DeleteFunc(slices.Clone(cp.candidates), func(j uint32) bool {
				_, replaced := cp.byName[ruleName{r.Org, cp.rules[j].Name}]
				return replaced
			})
		}
		if candidate(r) {
			list = append(list, uint32(i))
		}
		cp.orgCandidates[r.Org] = list
	}
	return cp, nil
}

// ruleName names a rule within its org.
type ruleName struct{ org, name string }

// candidatesFor returns the rules an admission of an identity in org looks
// at.
func (cp *compiledPolicy) candidatesFor(org string) []uint32 {
	if list, ok := cp.orgCandidates[cmp.Or(org, DefaultOrg)]; ok {
		return list
	}
	return cp.candidates
}

// limitSource says where a charge's limit came from.
type limitSource uint8

const (
	fromRule limitSource = iota
	fromTier
	fromOverride
	fromProvider
)

// sourceNames names the sources other than the rule itself.
var sourceNames = [...]string{fromTier: "tier", fromOverride: "override", fromProvider: LimitFromProvider}

// name returns the source as Effective reports it.
func (s limitSource) name(r *compiledRule) string {
	return cmp.Or(sourceNames[s], r.Source)
}

// effective returns a rule's limit and burst for one identity at now, and
// where they came from. A rule with LimitFrom provider starts from what the
// provider allows id's model, when known (providerLimit, nil without
// provider limits); a tier or an override then changes that as it would
// the rule's own.
func (cp *compiledPolicy) effective(r *compiledRule, id *Identity, now time.Time, providerLimit func(*compiledRule, string) (int64, bool)) (limit, burst int64, source limitSource) {
	limit, burst, source = r.Limit, r.Burst, fromRule
	if r.LimitFrom == LimitFromProvider && providerLimit != nil {
		if n, ok := providerLimit(r, id.Model); ok {
			limit, source = n, fromProvider
		}
	}
	if pct, ok := cp.tiers[id.Tier]; ok && pct != 100 {
		limit = scale(limit, pct)
		burst = scale(burst, pct)
		source = fromTier
	}
	for _, a := range cp.overrideAttrs {
		v := id.attribute(a)
		if a == attrWorkspace || a == attrTeam || a == attrUser {
			v = id.qualified(a, "")
		}
		for _, o := range cp.overrides[overrideKey{a, v}] {
			if o.Rule != r.Name || (!o.ExpiresAt.IsZero() && !now.Before(o.ExpiresAt)) {
				continue
			}
			if o.Limit != nil {
				limit = *o.Limit
			}
			if o.Burst != nil {
				burst = *o.Burst
			}
			return limit, burst, fromOverride
		}
	}
	return limit, burst, source
}

// scale returns v*pct/100, at least 1 when v is positive.
func scale(v, pct int64) int64 {
	if v <= 0 {
		return v
	}
	if pct > 100 && v/100 > math.MaxInt64/pct {
		return math.MaxInt64
	}
	return max(1, v/100*pct+v%100*pct/100)
}

func (r *compiledRule) matches(id *Identity) bool {
	m := &r.Match
	return (len(m.Models) == 0 || slices.Contains(m.Models, id.Model)) &&
		(len(m.Tiers) == 0 || slices.Contains(m.Tiers, id.Tier)) &&
		(len(m.Routes) == 0 || slices.Contains(m.Routes, id.Route))
}
