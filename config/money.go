package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/dollars"
)

// A cost rule's money fields (limit, soft_limit, reserve_amount) are
// written in dollars, as prices and sessions.max_cost are: "limit: $500"
// (or "$0.25", "12.50"). The engine counts micro-dollars; the conversion is
// exact (see ParseDollars).
//
// A bare whole number on a cost rule is refused rather than read: before
// dollars, "limit: 500000000" meant $500 in micro-dollars, so either reading
// of it is a factor of a million away from the other, one spending without
// bound and the other refusing everything. The message gives what to write
// for both readings. A "$" or a decimal point is unambiguous.
var costMoneyFields = []string{"limit", "soft_limit", "reserve_amount"}

// ruleFields and matchFields are the YAML names a rule and its match may
// use: Rule.UnmarshalYAML checks them itself, since decoding a node again
// does not keep the file's strictness.
var (
	ruleFields  = append(yamlNames(reflect.TypeFor[sluice.Rule]()), "enabled")
	matchFields = yamlNames(reflect.TypeFor[sluice.Match]())
)

func yamlNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// UnmarshalYAML decodes a rule strictly, reading a cost rule's money in
// dollars. It reports every problem of the rule at once: unknown fields
// (its own and its match's) and money not in dollars.
func (r *Rule) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.MappingNode {
		type plain Rule
		return node.Decode((*plain)(r))
	}
	var problems []string
	if err := knownFields(node, ruleFields, "config.Rule"); err != nil {
		problems = append(problems, err.(*yaml.TypeError).Errors...)
	}
	edited := *node
	edited.Content = append([]*yaml.Node(nil), node.Content...)
	cost := false
	for i := 0; i+1 < len(edited.Content); i += 2 {
		k, v := edited.Content[i], edited.Content[i+1]
		switch k.Value {
		case "metric":
			cost = v.Value == string(sluice.MetricCost)
		case "match":
			if v.Kind == yaml.MappingNode {
				if err := knownFields(v, matchFields, "sluice.Match"); err != nil {
					problems = append(problems, err.(*yaml.TypeError).Errors...)
				}
			}
		}
	}
	if cost {
		for i := 0; i+1 < len(edited.Content); i += 2 {
			k, v := edited.Content[i], edited.Content[i+1]
			if !containsString(costMoneyFields, k.Value) {
				continue
			}
			micro, err := costAmount(k.Value, v)
			if err != nil {
				problems = append(problems, fmt.Sprintf("line %d: %v", v.Line, err))
				continue
			}
			n := *v
			n.Tag, n.Value, n.Style = "!!int", strconv.FormatInt(int64(micro), 10), 0
			edited.Content[i+1] = &n
		}
	}
	if len(problems) > 0 {
		return &yaml.TypeError{Errors: problems}
	}
	type plain Rule
	return edited.Decode((*plain)(r))
}

// costAmount reads one money field of a cost rule in dollars.
func costAmount(field string, v *yaml.Node) (Dollars, error) {
	if v.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("%s: a cost rule's %s is an amount in dollars, like $500", field, field)
	}
	s := strings.TrimSpace(v.Value)
	dollar := strings.HasPrefix(s, "$")
	s = strings.TrimPrefix(s, "$")
	s = strings.ReplaceAll(s, ",", "")
	if !dollar && !strings.Contains(s, ".") {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n != 0 {
			return 0, fmt.Errorf("%s: a cost rule's %s is money, written in dollars: %q would be %s: $%s; "+
				"as micro-dollars, as it was read before, it is %s: $%s",
				field, field, v.Value, field, strconv.FormatInt(n, 10), field, Dollars(n).Cents())
		}
	}
	d, err := ParseDollars(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", field, err)
	}
	return d, nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// knownFields refuses a key of mapping that is not in names, in the words
// of the strict decoder.
func knownFields(mapping *yaml.Node, names []string, typ string) error {
	var errs []string
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if k := mapping.Content[i]; !containsString(names, k.Value) {
			errs = append(errs, fmt.Sprintf("line %d: field %s not found in type %s", k.Line, k.Value, typ))
		}
	}
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

// Cents writes d in dollars with at least two decimals and as many more as
// it needs: "500.00", "0.0005", "1,234.50" (thousands separated).
func (d Dollars) Cents() string { return dollars.Cents(int64(d)) }

// MarshalYAML writes r as UnmarshalYAML reads it: a cost rule's money in
// dollars ("$500").
func (r Rule) MarshalYAML() (any, error) {
	type plain Rule
	var node yaml.Node
	if err := node.Encode(plain(r)); err != nil {
		return nil, err
	}
	if r.Metric != sluice.MetricCost || node.Kind != yaml.MappingNode {
		return &node, nil
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		if !containsString(costMoneyFields, k.Value) {
			continue
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("config: rule %q: %s: %w", r.Name, k.Value, err)
		}
		v.Tag, v.Value, v.Style = "!!str", "$"+Dollars(n).String(), 0
	}
	return &node, nil
}
