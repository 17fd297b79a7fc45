package admin

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
)

// keyLimitsRequest is the "limits" object of POST /admin/v1/keys: the
// key's own limits. Each is an override, for the key alone, of a per-key
// rule (subject key) of a fixed name (KeyLimitRules); a rule of that name
// in force (from the config file or stored) is used as it is, a missing
// one is stored with a limit of 0, so it binds no other key. An absent
// field sets nothing; 0 disables that rule for the key.
type keyLimitsRequest struct {
	RequestsPerMinute *int64            `json:"requests_per_minute"`
	TokensPerMinute   *int64            `json:"tokens_per_minute"`
	MaxInFlight       *int64            `json:"max_in_flight"`
	Budget            *keyBudgetRequest `json:"budget"`
}

// keyBudgetRequest is a key's own budget: an amount in dollars or in
// tokens per calendar period (UTC).
type keyBudgetRequest struct {
	Period sluice.Period `json:"period"`
	// Dollars is an exact decimal (25, "25.00", 0.5), read as written.
	Dollars json.Number `json:"dollars"`
	Tokens  *int64      `json:"tokens"`
}

// The names of the per-key rules a key's own limits override. A budget's
// rule is named by its metric and period: key_cost_per_month,
// key_tokens_per_day.
const (
	KeyRuleRequestsPerMinute = "key_requests_per_minute"
	KeyRuleTokensPerMinute   = "key_tokens_per_minute"
	KeyRuleInFlight          = "key_in_flight"
)

// KeyLimitRules returns the per-key rules POST /admin/v1/keys may store
// for a key's own limits, each with a limit of 0: requests and tokens per
// minute, calls in flight, and a cost or token budget per day, week and
// month.
func KeyLimitRules() []catalog.Rule {
	rules := []catalog.Rule{
		{Rule: sluice.Rule{Name: KeyRuleRequestsPerMinute, Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricRequests, Window: time.Minute}},
		{Rule: sluice.Rule{Name: KeyRuleTokensPerMinute, Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Window: time.Minute}},
		{Rule: sluice.Rule{Name: KeyRuleInFlight, Kind: sluice.KindConcurrency, Subject: "key", Metric: sluice.MetricConcurrency}},
	}
	for _, m := range []sluice.Metric{sluice.MetricCost, sluice.MetricTokens} {
		for _, p := range []sluice.Period{sluice.PeriodDay, sluice.PeriodWeek, sluice.PeriodMonth} {
			rules = append(rules, catalog.Rule{Rule: sluice.Rule{Name: budgetRuleName(m, p), Kind: sluice.KindBudget, Subject: "key", Metric: m, Period: p}})
		}
	}
	return rules
}

func budgetRuleName(m sluice.Metric, p sluice.Period) string {
	return "key_" + string(m) + "_per_" + string(p)
}

func keyLimitRule(name string) catalog.Rule {
	i := slices.IndexFunc(KeyLimitRules(), func(r catalog.Rule) bool { return r.Name == name })
	return KeyLimitRules()[i]
}

// keyLimits turns a limits object into the catalog's key limits, each
// checked against the rule of its name in force.
// org is the key's org ("" meaning the default one).
func (h *Handler) keyLimits(req *keyLimitsRequest, org string) ([]catalog.KeyLimit, error) {
	if req == nil {
		return nil, nil
	}
	type want struct {
		field string
		rule  string
		limit *int64
	}
	wants := []want{
		{"requests_per_minute", KeyRuleRequestsPerMinute, req.RequestsPerMinute},
		{"tokens_per_minute", KeyRuleTokensPerMinute, req.TokensPerMinute},
		{"max_in_flight", KeyRuleInFlight, req.MaxInFlight},
	}
	if b := req.Budget; b != nil {
		rule, amount, err := budgetLimit(b)
		if err != nil {
			return nil, err
		}
		wants = append(wants, want{"budget", rule, &amount})
	}
	var out []catalog.KeyLimit
	for _, w := range wants {
		if w.limit == nil {
			continue
		}
		if *w.limit < 0 {
			return nil, errorf(http.StatusBadRequest, "invalid_limits", "limits.%s must not be negative (0 disables the rule for the key), got %d", w.field, *w.limit)
		}
		def := keyLimitRule(w.rule)
		store, err := h.needsRule(def, cmp.Or(org, sluice.DefaultOrg))
		if err != nil {
			return nil, err
		}
		out = append(out, catalog.KeyLimit{Rule: def, Store: store, Limit: *w.limit})
	}
	return out, nil
}

// budgetLimit returns the rule and the limit of a key's budget: dollars in
// micro-dollars, or tokens.
func budgetLimit(b *keyBudgetRequest) (rule string, amount int64, err error) {
	if !slices.Contains([]sluice.Period{sluice.PeriodDay, sluice.PeriodWeek, sluice.PeriodMonth}, b.Period) {
		return "", 0, errorf(http.StatusBadRequest, "invalid_limits", "limits.budget.period must be day, week or month, got %q", b.Period)
	}
	switch {
	case b.Dollars != "" && b.Tokens != nil:
		return "", 0, errorf(http.StatusBadRequest, "invalid_limits", "limits.budget takes dollars or tokens, not both")
	case b.Dollars != "":
		d, err := config.ParseDollars(b.Dollars.String())
		if err != nil {
			return "", 0, errorf(http.StatusBadRequest, "invalid_limits", "limits.budget.dollars: %v", err)
		}
		return budgetRuleName(sluice.MetricCost, b.Period), int64(d), nil
	case b.Tokens != nil:
		if *b.Tokens < 0 {
			return "", 0, errorf(http.StatusBadRequest, "invalid_limits", "limits.budget.tokens must not be negative, got %d", *b.Tokens)
		}
		return budgetRuleName(sluice.MetricTokens, b.Period), *b.Tokens, nil
	}
	return "", 0, errorf(http.StatusBadRequest, "invalid_limits", "limits.budget needs dollars or tokens")
}

// needsRule reports whether def must be stored for a key limit of a key
// of org to apply: no rule of its name is in force there (the
// deployment's, or org's own). One in force must have its shape and be
// enabled, or the key's limit would count something else, or nothing.
func (h *Handler) needsRule(def catalog.Rule, org string) (bool, error) {
	found := false
	for _, r := range h.limiter.Policy().Rules {
		if r.Name != def.Name || (r.Org != "" && r.Org != org) {
			continue
		}
		found = true
		where := r.Source + " rules"
		if r.Org != "" {
			where = "org " + r.Org + "'s " + where
		}
		if !catalog.SameShape(r, def.Rule) {
			return false, errorf(http.StatusConflict, "rule_conflict",
				"rule %q (from the %s) is %s; a key's own limit needs it to be %s: rename that rule or change it",
				def.Name, where, shapeOf(r), shapeOf(def.Rule))
		}
		if r.Disabled {
			return false, errorf(http.StatusConflict, "rule_conflict", "rule %q (from the %s) is disabled: a key's own limit on it would count nothing; enable it first", def.Name, where)
		}
	}
	return !found, nil
}

// shapeOf describes what a rule counts: "a budget of cost per key per
// month".
func shapeOf(r sluice.Rule) string {
	metric := string(r.Metric)
	if metric == "" {
		metric = string(sluice.MetricRequests)
	}
	switch r.Kind {
	case sluice.KindConcurrency:
		return "a concurrency limit per " + r.Subject
	case sluice.KindBudget:
		return "a budget of " + metric + " per " + r.Subject + " per " + string(r.Period)
	}
	return "a rate of " + metric + " per " + r.Subject + " per " + r.Window.String()
}

// keyPatch is the body of PATCH /admin/v1/keys/{id}: each field present
// replaces the key's; the secret and the identity (org, workspace, team,
// user) stay. allowed_models [] allows any model; expires_at null means
// never; class "" and max_wait "0s" or null mean the tier's.
type keyPatch struct {
	Name          *string         `json:"name"`
	Tier          *string         `json:"tier"`
	AllowedModels *[]string       `json:"allowed_models"`
	ExpiresAt     json.RawMessage `json:"expires_at"`
	Class         *string         `json:"class"`
	MaxWait       json.RawMessage `json:"max_wait"`
}

func (h *Handler) updateKey(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req keyPatch
	if err := decode(w, r, &req); err != nil {
		return err
	}
	u := catalog.KeyUpdate{Name: req.Name, Tier: req.Tier, AllowedModels: req.AllowedModels, Class: req.Class}
	var err error
	if u.MaxWait, err = maxWaitField(req.MaxWait); err != nil {
		return err
	}
	if len(req.ExpiresAt) > 0 {
		var t time.Time
		if string(req.ExpiresAt) != "null" {
			if err := json.Unmarshal(req.ExpiresAt, &t); err != nil {
				return errorf(http.StatusBadRequest, "invalid_field", "field \"expires_at\": want an RFC 3339 time or null, got %s", req.ExpiresAt)
			}
		}
		u.ExpiresAt = &t
	}
	if u.Name == nil && u.Tier == nil && u.AllowedModels == nil && u.ExpiresAt == nil && u.Class == nil && u.MaxWait == nil {
		return errorf(http.StatusBadRequest, "invalid_body", "the body changes nothing: give name, tier, allowed_models, expires_at, class or max_wait")
	}
	id := r.PathValue("id")
	if check := h.opts.CheckKey; check != nil && (u.Tier != nil || u.AllowedModels != nil) {
		k, err := h.cat.GetKey(r.Context(), id)
		if err != nil {
			return err
		}
		tier, models := k.Tier, k.AllowedModels
		if u.Tier != nil {
			tier = *u.Tier
		}
		if u.AllowedModels != nil {
			models = *u.AllowedModels
		}
		if err := check(tier, models); err != nil {
			return errorf(http.StatusBadRequest, "invalid_key", "%v", err)
		}
	}
	k, err := h.cat.UpdateKey(r.Context(), id, u, p.actor)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": k})
	return nil
}
