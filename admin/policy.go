package admin

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
)

// SourceRule is the Source of rules stored in the catalog.
const SourceRule = "rule"

// LoadPolicy builds the limiter's policy: the layers given (the defaults,
// the config file, the environment, in order), then the rules stored in
// the catalog (a stored rule replaces an earlier one of the same name and org),
// then the stored overrides. Overrides naming no rule in force are left
// out and reported in skipped, so that deleting a rule never makes the
// policy invalid.
func LoadPolicy(ctx context.Context, cat *catalog.Catalog, layers []config.Layer, tiers []sluice.Tier) (p sluice.Policy, skipped []catalog.Override, err error) {
	stored, err := cat.ListRules(ctx)
	if err != nil {
		return sluice.Policy{}, nil, fmt.Errorf("admin: load policy: %w", err)
	}
	db := config.Layer{Source: SourceRule}
	for _, r := range stored {
		db.Rules = append(db.Rules, r.Rule)
	}
	rules := config.Resolve(append(slices.Clone(layers), db)...)
	overrides, err := cat.ListOverrides(ctx)
	if err != nil {
		return sluice.Policy{}, nil, fmt.Errorf("admin: load policy: %w", err)
	}
	p = sluice.Policy{Rules: rules, Tiers: tiers}
	for _, o := range overrides {
		if !slices.ContainsFunc(rules, func(r sluice.Rule) bool { return r.Name == o.Rule }) {
			skipped = append(skipped, o)
			continue
		}
		p.Overrides = append(p.Overrides, o.Sluice())
	}
	return p, skipped, nil
}
