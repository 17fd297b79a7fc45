package sluice

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Kind is the algorithm of a rule.
type Kind string

// The three kinds of rule.
const (
	// KindRate is a token bucket: at most Limit per Window, refilled
	// continuously, with capacity Burst.
	KindRate Kind = "rate"
	// KindConcurrency caps the calls admitted and not yet settled.
	KindConcurrency Kind = "concurrency"
	// KindBudget caps a metric per calendar period.
	KindBudget Kind = "budget"
)

// Metric names what a rule counts. Any other non-empty name made of
// lower-case letters, digits and underscores is a custom metric, charged
// from Usage.Custom.
type Metric string

// The built-in metrics.
const (
	MetricRequests    Metric = "requests"
	MetricInputTokens Metric = "input_tokens"
	// MetricUncachedInputTokens counts input tokens not read from a cache
	// (InputTokens minus CachedInputTokens), as providers' own input
	// limits often do (Anthropic's input tokens per minute leave cache
	// reads out). Before a call, when cache reads are unknown, every input
	// token is reserved; settlement gives back the cached ones.
	MetricUncachedInputTokens Metric = "uncached_input_tokens"
	MetricOutputTokens        Metric = "output_tokens"
	MetricTokens              Metric = "tokens"
	MetricCost                Metric = "cost" // integer micro-dollars
	MetricConcurrency         Metric = "concurrency"
)

// Mode says whether a rule refuses. The empty Mode is ModeEnforce.
type Mode string

// Rule modes.
const (
	ModeEnforce Mode = "enforce"
	// ModeShadow counts and reports, but never refuses.
	ModeShadow Mode = "shadow"
)

// Period is the calendar period of a budget.
type Period string

// Budget periods.
const (
	PeriodDay   Period = "day"
	PeriodWeek  Period = "week" // ISO week, from Monday
	PeriodMonth Period = "month"
)

// Reservation policies, the values of Rule.Reserve: what a budget (or a
// token bucket) reserves at admission. The empty policy is ReserveWorstCase.
const (
	// ReserveWorstCase reserves Request.Max: the input estimate plus the
	// output bound.
	ReserveWorstCase = "worst_case"
	// ReserveEstimate reserves Request.Expected (Request.Max when Expected is
	// zero).
	ReserveEstimate = "estimate"
	// ReserveFixed reserves Rule.ReserveAmount.
	ReserveFixed = "fixed"
)

// Expiry policies, the values of Rule.OnExpiry: what the sweep does with a
// budget reservation that was not settled by its deadline. The empty
// policy is ExpiryCharge.
const (
	// ExpiryCharge charges the reserved amount (fail closed).
	ExpiryCharge = "charge"
	// ExpiryRelease refunds the reservation.
	ExpiryRelease = "release"
)

// Cache hit charges, the values of Rule.CacheHits: what a rule charges an
// answer served from a cache. The empty value is CacheHitsMinimal.
const (
	// CacheHitsMinimal charges a hit 1 (one token, one micro-dollar), so a
	// spent budget refuses hits too.
	CacheHitsMinimal = "minimal"
	// CacheHitsNone charges a hit nothing.
	CacheHitsNone = "none"
	// CacheHitsFull charges a hit the usage of the call whose answer it
	// replays (Request.Max of a hit), for an operator who bills hits.
	CacheHitsFull = "full"
)

// Store error policies, the values of Rule.OnStoreError: what the Limiter
// does when the store cannot answer for a rule. The empty policy is
// StoreErrorClosed.
const (
	StoreErrorClosed = "closed"
	StoreErrorOpen   = "open"
)

// LimitFromProvider, as a rule's LimitFrom, makes the rule's limit what
// the model's provider allows, as told by Limiter.SetProviderLimits.
const LimitFromProvider = "provider"

// ProviderLimits are what a provider allows one model, as its answers say
// (the gateway reads them from the rate-limit headers and the 429s). A
// count of 0 is one the provider did not give.
type ProviderLimits struct {
	Requests int64
	// Tokens counts input and output tokens, InputTokens input tokens
	// only (Anthropic may give an input-token limit alone).
	Tokens      int64
	InputTokens int64
	// Per is what the counts are per; 0 means a minute, as OpenAI and
	// Anthropic count.
	Per time.Duration
	// HeldUntil is a provider refusal's retry hint: until then the
	// provider refuses the model's calls, and the rules that take their
	// limit from it refuse them first.
	HeldUntil time.Time
}

// Class is a priority class of a rate or concurrency rule. The rule's
// capacity is split into one share per class: the class's Floor, and its
// part by Weight of what the floors leave. A class may borrow the share of
// a class that does not ask for it (so a class alone may use the whole
// capacity); once a class is refused while borrowers hold its share, it
// signals demand, and borrowers of its share are refused from then on:
// calls in flight are not cut, a rate's refill goes to the owner.
type Class struct {
	Name string `json:"name" yaml:"name"`
	// Weight is the class's part of the capacity the floors leave; 0
	// means 1.
	Weight int64 `json:"weight,omitempty" yaml:"weight,omitempty"`
	// Floor is the capacity the class is given before weights apply, in
	// the rule's units (calls in flight, or the metric per window).
	Floor int64 `json:"floor,omitempty" yaml:"floor,omitempty"`
}

// Match narrows a rule to some requests. An empty list matches everything.
type Match struct {
	Models []string `json:"models,omitempty" yaml:"models,omitempty"`
	Tiers  []string `json:"tiers,omitempty" yaml:"tiers,omitempty"`
	Routes []string `json:"routes,omitempty" yaml:"routes,omitempty"`
}

// Rule is one limit. The zero values of the optional fields are the
// documented defaults; a Limit of 0 disables the rule.
//
// Its json and yaml tags are the one schema of a rule: the names the config
// file, the catalog and the admin API use (soft_limit, on_expiry, ...). Its
// JSON form is RuleJSON (durations as strings, enabled for Disabled); the
// layers that read rules add only what they own (the catalog its
// timestamps, the admin API a rule's source).
type Rule struct {
	// Name identifies the rule; it is unique in a policy and named in
	// refusals.
	Name string `json:"name" yaml:"name"`
	Kind Kind   `json:"kind" yaml:"kind"`
	// Subject is who pays: an identity attribute (org, workspace, team,
	// user, key, ip, session, model, route, tag, tier), a composite of them
	// joined by "+" ("workspace+user": one counter per user in each
	// workspace), "global" (one counter for everyone) or "server" (one per
	// Limiter, named by Options.ServerID).
	Subject string `json:"subject" yaml:"subject"`
	// Metric is what is counted. Empty means requests for rate and budget
	// rules and concurrency for concurrency rules.
	Metric Metric `json:"metric,omitempty" yaml:"metric,omitempty"`
	// Limit is the most that is admitted per Window (rate), in flight
	// (concurrency) or per Period (budget). 0 disables the rule.
	Limit int64 `json:"limit" yaml:"limit"`
	// LimitFrom, when LimitFromProvider, makes a rate rule's limit what
	// the model's provider allows (see Limiter.SetProviderLimits); Limit
	// applies until the provider has said.
	LimitFrom string `json:"limit_from,omitempty" yaml:"limit_from,omitempty"`
	// Burst is the capacity of a rate rule's bucket; 0 means Limit.
	Burst int64 `json:"burst,omitempty" yaml:"burst,omitempty"`
	// Window is the refill window of a rate rule, written "1m".
	Window time.Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// Period is the calendar period of a budget.
	Period Period `json:"period,omitempty" yaml:"period,omitempty"`
	// TimeZone is the IANA zone in which a budget's periods begin; empty
	// means UTC.
	TimeZone string `json:"time_zone,omitempty" yaml:"time_zone,omitempty"`
	// SoftLimit raises a warning once a budget's usage reaches it; 0 means
	// none.
	SoftLimit int64 `json:"soft_limit,omitempty" yaml:"soft_limit,omitempty"`
	// WarnAt lists fractions of Limit (in (0, 1]) at which a budget raises a
	// warning.
	WarnAt []float64 `json:"warn_at,omitempty" yaml:"warn_at,omitempty"`
	// Reserve is what is reserved at admission for token and cost metrics:
	// ReserveWorstCase (the default), ReserveEstimate or ReserveFixed.
	Reserve string `json:"reserve,omitempty" yaml:"reserve,omitempty"`
	// ReserveAmount is the fixed reservation when Reserve is ReserveFixed.
	ReserveAmount int64 `json:"reserve_amount,omitempty" yaml:"reserve_amount,omitempty"`
	// OnExpiry is what the sweep does with an unsettled budget reservation:
	// ExpiryCharge (the default) or ExpiryRelease.
	OnExpiry string `json:"on_expiry,omitempty" yaml:"on_expiry,omitempty"`
	// OnStoreError is what the gateway does when the store cannot answer:
	// StoreErrorClosed (the default) or StoreErrorOpen.
	OnStoreError string `json:"on_store_error,omitempty" yaml:"on_store_error,omitempty"`
	// Fit, when "clamp", lets the gateway lower a request's output cap to
	// what still fits instead of refusing, down to MinOutputTokens.
	Fit             string `json:"fit,omitempty" yaml:"fit,omitempty"`
	MinOutputTokens int64  `json:"min_output_tokens,omitempty" yaml:"min_output_tokens,omitempty"`
	Match           Match  `json:"match,omitzero" yaml:"match,omitempty"`
	Mode            Mode   `json:"mode,omitempty" yaml:"mode,omitempty"`
	// BusyRetryAfter is, for a concurrency rule, the most its busy
	// refusals tell a client to wait (the earliest of its calls to end may
	// be far off: a call's deadline). Zero means Options.BusyRetryAfter.
	BusyRetryAfter time.Duration `json:"busy_retry_after,omitempty" yaml:"busy_retry_after,omitempty"`
	// CacheHits is what a token, cost or custom rule charges an answer
	// served from a cache (Request.CacheHit); empty means CacheHitsMinimal.
	// A rule counting requests charges a hit 1, as any call.
	CacheHits string `json:"cache_hits,omitempty" yaml:"cache_hits,omitempty"`
	// Classes split a rate or concurrency rule's capacity between priority
	// classes, each with a floor and a weight (see Class); the floors add
	// up to at most Limit. Empty: no classes.
	Classes []Class `json:"classes,omitempty" yaml:"classes,omitempty"`
	// DefaultClass is the class of a request whose identity names none of
	// Classes; empty means the last class listed.
	DefaultClass string `json:"default_class,omitempty" yaml:"default_class,omitempty"`
	// Disabled rules are not checked and count nothing. The config file
	// and the JSON form write it as enabled (true by default).
	Disabled bool `json:"-" yaml:"-"`
	// Org, when set, limits the rule to requests whose identity is in that
	// org (an identity with no org is in DefaultOrg); empty applies the
	// rule in every org. A rule with an Org replaces, in that org only, the
	// rule of the same name that has none, and counts apart from it. The
	// config file holds deployment rules only: an org's rules are stored in
	// the catalog.
	Org string `json:"org,omitempty" yaml:"-"`
	// Source says where the rule came from (default, config, env, rule,
	// override, tier); it is reported, never interpreted, and never read
	// from a file or a request.
	Source string `json:"-" yaml:"-"`
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("90s", "1m"): how RuleJSON writes a rule's Window.
type Duration time.Duration

// String is the duration in Go's notation ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string; a number is refused, since its
// unit would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"1m\" or \"90s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration string such as \"1m\" or \"90s\": %w", err)
	}
	*d = Duration(v)
	return nil
}

// RuleError reports an invalid rule, naming the rule and the field.
type RuleError struct {
	Rule    string
	Field   string
	Message string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("sluice: rule %q: %s: %s", e.Rule, e.Field, e.Message)
}

// attribute indexes the identity attributes a subject is built from.
type attribute uint8

const (
	attrOrg attribute = iota
	attrWorkspace
	attrTeam
	attrUser
	attrKey
	attrIP
	attrSession
	attrModel
	attrRoute
	attrTier
	attrTag
	attrGlobal
	attrServer
)

var attributeNames = map[string]attribute{
	"org": attrOrg, "workspace": attrWorkspace, "team": attrTeam, "user": attrUser,
	"key": attrKey, "ip": attrIP, "session": attrSession, "model": attrModel,
	"route": attrRoute, "tier": attrTier, "tag": attrTag, "global": attrGlobal,
	"server": attrServer,
}

// parseSubject splits a subject into its attributes.
func parseSubject(subject string) ([]attribute, error) {
	if subject == "" {
		return nil, fmt.Errorf("is empty")
	}
	parts := strings.Split(subject, "+")
	attrs := make([]attribute, 0, len(parts))
	for _, p := range parts {
		a, ok := attributeNames[p]
		if !ok {
			return nil, fmt.Errorf("unknown attribute %q", p)
		}
		if (a == attrGlobal || a == attrServer) && len(parts) > 1 {
			return nil, fmt.Errorf("%q cannot be combined", p)
		}
		if slices.Contains(attrs, a) {
			return nil, fmt.Errorf("attribute %q repeated", p)
		}
		attrs = append(attrs, a)
	}
	return attrs, nil
}

func validMetricName(m Metric) bool {
	return m != "" && len(m) <= 64 && strings.Trim(string(m), "abcdefghijklmnopqrstuvwxyz0123456789_") == ""
}

// Validate reports the first problem with r as a *RuleError.
func (r *Rule) Validate() error {
	_, err := compileRule(*r)
	return err
}

// metric returns the rule's metric with its default applied.
func (r *Rule) metric() Metric {
	if r.Kind == KindConcurrency {
		return cmp.Or(r.Metric, MetricConcurrency)
	}
	return cmp.Or(r.Metric, MetricRequests)
}
