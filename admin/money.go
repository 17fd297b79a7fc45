package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"

	"github.com/sluicehq/sluice/internal/dollars"
)

// amountOf reads a rule's limit, soft_limit or reserve_amount. On a cost
// rule it is money in dollars, as in the config file: a string ("$500",
// "0.25") or a number with a point (12.5), converted exactly to the
// micro-dollars the engine counts. A bare whole number on a cost rule is
// refused rather than read: it meant micro-dollars before, so either
// reading is a factor of a million from the other; the message gives both.
// Other rules' amounts are whole numbers. Absent or null is 0.
func amountOf(field string, raw json.RawMessage, cost bool) (int64, error) {
	if isNull(raw) {
		return 0, nil
	}
	raw = bytes.TrimSpace(raw)
	if !cost {
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, errorf(http.StatusBadRequest, "invalid_field", "field %q: want an integer, got %s", field, jsonKind(raw))
		}
		return n, nil
	}
	var text string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return 0, errorf(http.StatusBadRequest, "invalid", "%s: %v", field, err)
		}
		text = strings.TrimPrefix(strings.TrimSpace(text), "$")
	} else {
		text = string(raw)
		if !strings.ContainsAny(text, ".eE") && text != "0" {
			var n int64
			if err := json.Unmarshal(raw, &n); err == nil {
				return 0, errorf(http.StatusBadRequest, "invalid",
					"a cost rule's %s is money in dollars: send \"%s\": \"$%d\" for %d dollars; as micro-dollars, as it was read before, %d is \"%s\": \"$%s\"",
					field, field, n, n, n, field, config.Dollars(n).Cents())
			}
		}
	}
	d, err := config.ParseDollars(strings.ReplaceAll(text, ",", ""))
	if err != nil {
		return 0, errorf(http.StatusBadRequest, "invalid", "%s: %v", field, err)
	}
	return int64(d), nil
}

// jsonKind names the JSON type of raw, as decode's messages do.
func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	}
	return "number"
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// ruleOut is a stored rule as the admin API writes it: its stored
// definition, a cost rule's amounts in dollars ("$500"), as they are sent;
// other rules' as counts.
type ruleOut struct{ catalog.Rule }

func ruleOutOf(r catalog.Rule) ruleOut { return ruleOut{r} }

// MarshalJSON writes the catalog's JSON with a cost rule's amounts in
// dollars.
func (r ruleOut) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(r.Rule)
	return inDollars(r.Metric, b, err)
}

// costAmounts matches the amounts of a rule's JSON. encoding/json writes
// a string's quotes escaped, so these never match inside one.
var costAmounts = regexp.MustCompile(`"(limit|soft_limit|reserve_amount)":(\d+)`)

// overrideAmounts matches the amounts of an override's JSON, as
// costAmounts does a rule's.
var overrideAmounts = regexp.MustCompile(`"(limit|burst)":(\d+)`)

// inDollars rewrites the amounts of b, a rule's JSON (as json.Marshal
// returns it, with err), in dollars when the rule's metric is cost.
func inDollars(metric sluice.Metric, b []byte, err error) ([]byte, error) {
	if err != nil || metric != sluice.MetricCost {
		return b, err
	}
	return amountsInDollars(costAmounts, b), nil
}

// amountsInDollars rewrites the amounts amounts matches in b, a JSON
// object, as dollars.
func amountsInDollars(amounts *regexp.Regexp, b []byte) []byte {
	return amounts.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := amounts.FindSubmatch(m)
		n, _ := strconv.ParseInt(string(sub[2]), 10, 64)
		return fmt.Appendf(nil, `"%s":"%s"`, sub[1], dollarText(n))
	})
}

// auditInDollars returns e with the amounts of a cost rule in its before
// and after in dollars, as the rules and overrides APIs write them: a
// rule's entry by the metric it records, an override's by the metric of
// its rule in force (one no longer in force, as stored). Other entries,
// and other values, are as stored.
func (h *Handler) auditInDollars(e catalog.AuditEntry) catalog.AuditEntry {
	e.Before, e.After = h.auditValueInDollars(e.Action, e.Before), h.auditValueInDollars(e.Action, e.After)
	return e
}

// auditValueInDollars is v, the before or after of an audit entry of
// action, with a cost rule's amounts in dollars.
func (h *Handler) auditValueInDollars(action string, v any) any {
	raw, ok := v.(json.RawMessage)
	if !ok {
		return v
	}
	switch action {
	case catalog.ActionRuleCreate, catalog.ActionRuleUpdate, catalog.ActionRuleDelete:
		var r struct {
			Metric sluice.Metric `json:"metric"`
		}
		if json.Unmarshal(raw, &r) != nil || r.Metric != sluice.MetricCost {
			return v
		}
		return json.RawMessage(amountsInDollars(costAmounts, raw))
	case catalog.ActionOverrideSet, catalog.ActionOverrideDelete:
		var o struct {
			Rule string `json:"rule"`
		}
		if json.Unmarshal(raw, &o) != nil || !h.ruleIsCost(o.Rule) {
			return v
		}
		return json.RawMessage(amountsInDollars(overrideAmounts, raw))
	}
	return v
}

// dollarText writes micro-dollars n as the API writes money: "$500",
// "$0.000123", "-$2.5" (what a rate rule in debt has left).
func dollarText(n int64) string { return dollars.Text(n) }

// money is an amount in micro-dollars that the API writes in dollars.
type money int64

func (m money) MarshalJSON() ([]byte, error) { return json.Marshal(dollarText(int64(m))) }

// moneyPtr is p as money; nil stays nil.
func moneyPtr(p *int64) *money {
	if p == nil {
		return nil
	}
	m := money(*p)
	return &m
}

// ruleIsCost reports whether the rule in force named name counts money;
// a per-key rule of a key's own limits (KeyLimitRules) not yet in force,
// whether it will.
func (h *Handler) ruleIsCost(name string) bool {
	metric := h.ruleMetric(name)
	if metric == "" {
		for _, r := range KeyLimitRules() {
			if r.Name == name {
				metric = string(r.Metric)
			}
		}
	}
	return metric == string(sluice.MetricCost)
}

// ruleMetric is the metric of the rule in force named name; "" when none
// is.
func (h *Handler) ruleMetric(name string) string {
	for _, r := range h.limiter.Policy().Rules {
		if r.Name == name {
			return string(r.Metric)
		}
	}
	return ""
}

func rulesOut(rules []catalog.Rule) []ruleOut {
	out := make([]ruleOut, 0, len(rules))
	for _, r := range rules {
		out = append(out, ruleOutOf(r))
	}
	return out
}
