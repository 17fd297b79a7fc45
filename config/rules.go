package config

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// The sources of rule layers, in resolution order.
const (
	SourceDefault = "default"
	SourceConfig  = "config"
	SourceEnv     = "env"
)

// The names of the quick-knob rules.
const (
	RuleRatePerMinute    = "rate_per_minute"
	RuleDailyTokenBudget = "daily_token_budget"
	RuleMaxInFlight      = "max_in_flight"
)

// quickKnob is a rule whose limit an environment variable sets.
type quickKnob struct {
	variable string
	rule     sluice.Rule
}

// quickKnobs are the built-in default rules, in the order they resolve.
var quickKnobs = []quickKnob{
	{VarRatePerMinute, sluice.Rule{
		Name: RuleRatePerMinute, Kind: sluice.KindRate, Subject: "workspace+user",
		Metric: sluice.MetricRequests, Limit: 20, Window: time.Minute,
	}},
	{VarDailyTokenBudget, sluice.Rule{
		// An empty TimeZone is UTC.
		Name: RuleDailyTokenBudget, Kind: sluice.KindBudget, Subject: "workspace",
		Metric: sluice.MetricTokens, Limit: 2_000_000, Period: sluice.PeriodDay,
	}},
	{VarMaxInFlight, sluice.Rule{
		Name: RuleMaxInFlight, Kind: sluice.KindConcurrency, Subject: "server",
		Metric: sluice.MetricConcurrency, Limit: 16, BusyRetryAfter: 5 * time.Second,
	}},
}

// DefaultRules returns the quick-knob rules at their built-in limits: 20
// requests a minute per workspace+user, 2,000,000 tokens a UTC day per
// workspace, 16 calls in flight per server.
func DefaultRules() []sluice.Rule {
	rules := make([]sluice.Rule, len(quickKnobs))
	for i, k := range quickKnobs {
		rules[i] = k.rule
	}
	return rules
}

// Layer is one source of rules in the resolution order: built-in defaults,
// the config file, environment knobs, rules stored in the database.
type Layer struct {
	Source string
	Rules  []sluice.Rule
}

// Resolve merges layers in order: a rule in a later layer replaces the rule
// of the same name and Org from an earlier one (a rule with an Org and one
// without are two rules: the first replaces the second in its org only, as
// the Limiter applies them). Each rule's Source is set to its layer's
// Source. The order of first appearance is kept.
func Resolve(layers ...Layer) []sluice.Rule {
	type orgAndName struct{ org, name string }
	var out []sluice.Rule
	index := map[orgAndName]int{}
	for _, layer := range layers {
		for _, r := range layer.Rules {
			r.Source = layer.Source
			k := orgAndName{r.Org, r.Name}
			if i, ok := index[k]; ok {
				out[i] = r
				continue
			}
			index[k] = len(out)
			out = append(out, r)
		}
	}
	return out
}

// Layers returns the rule layers of c in resolution order: "default" (the
// quick-knob rules at their built-in limits), "config" (the file's rules)
// and "env" (the quick-knob rules whose variable is set, with the limit it
// sets). Resolve(c.Layers()...) gives the effective rules; a rule
// whose limit is 0 stays in the list, disabled by its limit.
//
// A knob changes only the limit: when the file redefines a quick-knob rule
// (say rate_per_minute per key), the environment's limit applies to the
// file's rule.
func (c *Config) Layers() []Layer {
	defaults := DefaultRules()
	file := make([]sluice.Rule, 0, len(c.Rules))
	for i := range c.Rules {
		file = append(file, c.Rules[i].SluiceRule())
	}
	var env []sluice.Rule
	if len(c.Knobs) > 0 {
		base := Resolve(
			Layer{Source: SourceDefault, Rules: defaults},
			Layer{Source: SourceConfig, Rules: file},
		)
		for _, k := range quickKnobs {
			limit, ok := c.Knobs[k.variable]
			if !ok {
				continue
			}
			for _, r := range base {
				if r.Name == k.rule.Name {
					r.Limit, r.Source = limit, ""
					env = append(env, r)
					break
				}
			}
		}
	}
	return []Layer{
		{Source: SourceDefault, Rules: defaults},
		{Source: SourceConfig, Rules: file},
		{Source: SourceEnv, Rules: env},
	}
}

// EffectiveRules is Resolve(c.Layers()...): the rules of the
// defaults, the file and the environment, before the database's.
func (c *Config) EffectiveRules() []sluice.Rule {
	return Resolve(c.Layers()...)
}

// Warnings returns one sentence per limit that is disabled (a limit of 0,
// or enabled: false) and per model without a price, plus the fallback to
// the built-in mock models and provider keys missing from the environment.
// The gateway prints them at every start in production.
func (c *Config) Warnings() []string {
	var out []string
	for _, r := range c.EffectiveRules() {
		var why string
		switch {
		case r.Limit == 0 && r.Source == SourceEnv:
			why = fmt.Sprintf("%s=0", c.knobVariable(r.Name))
		case r.Limit == 0:
			why = fmt.Sprintf("its limit is 0 in the %s rules", r.Source)
		case r.Disabled:
			why = fmt.Sprintf("enabled: false in the %s rules", r.Source)
		case r.Metric == sluice.MetricCost && r.Limit < 10_000:
			// Under a cent is a cap no call fits: most likely micro-dollars
			// written where dollars were meant.
			out = append(out, fmt.Sprintf("limit %q is $%s per %s, under a cent: write dollars (limit: $500 for five hundred dollars)",
				r.Name, Dollars(r.Limit).Cents(), perOf(r)))
			continue
		default:
			continue
		}
		out = append(out, fmt.Sprintf("limit %q is disabled (%s): nothing is counted or refused by it", r.Name, why))
	}
	for i := range c.Models {
		if c.Models[i].Price == nil {
			out = append(out, fmt.Sprintf("model %q has no price: its calls cost 0 against cost budgets", c.Models[i].Name))
		}
	}
	if c.mockFallback {
		out = append(out, "no provider is configured: serving the built-in mock models")
	}
	return append(out, c.missingKeys...)
}

func (c *Config) knobVariable(rule string) string {
	if v := KnobVariable(rule); v != "" {
		return v
	}
	return rule
}

// KnobVariable names the environment variable that sets the limit of the
// built-in rule named rule (0 turns it off); "" for any other rule.
func KnobVariable(rule string) string {
	for _, k := range quickKnobs {
		if k.rule.Name == rule {
			return k.variable
		}
	}
	return ""
}

// perOf names what a rule's limit is per: a budget's period, a rate rule's
// window.
func perOf(r sluice.Rule) string {
	if r.Kind == sluice.KindBudget {
		return string(r.Period)
	}
	return r.Window.String()
}
