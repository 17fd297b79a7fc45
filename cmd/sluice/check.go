package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/config"
)

// check validates a config and prints the effective limits and warnings.
func check(args []string) error { return checkTo(os.Stdout, args) }

func checkTo(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var c common
	c.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "config is valid")
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tKIND\tSUBJECT\tLIMIT\tSOURCE\tSTATE")
	for _, r := range cfg.EffectiveRules() {
		state := "enforce"
		switch {
		case r.Disabled || r.Limit == 0:
			state = "disabled"
		case r.Mode == "shadow":
			state = "shadow"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Kind, r.Subject, limitWithUnit(r), r.Source, state)
	}
	_ = w.Flush()
	fmt.Fprintln(out)
	printBuiltIns(out, cfg.EffectiveRules())
	for _, m := range cfg.Models {
		fmt.Fprintf(out, "model %s (provider %s): max output %d tokens\n", m.Name, m.Provider, m.MaxOutputTokens)
	}
	listed, stale := priceListReport(cfg, time.Now())
	for _, line := range listed {
		fmt.Fprintln(out, line)
	}
	for _, t := range cfg.TenantModels {
		fmt.Fprintf(out, "tenant model %s: %s\n", t.Name, describeTenantModel(t))
	}
	for _, t := range cfg.Tiers {
		fmt.Fprintf(out, "tier %s: %d%% of each limit", t.Name, t.Percent)
		if p := t.Promote; p != nil {
			var when []string
			if p.After > 0 {
				when = append(when, fmt.Sprintf("is %v old", p.After))
			}
			if p.Tokens > 0 {
				when = append(when, fmt.Sprintf("has settled %s tokens", count(p.Tokens)))
			}
			if p.Cost > 0 {
				when = append(when, fmt.Sprintf("has spent $%s", p.Cost.Cents()))
			}
			fmt.Fprintf(out, ", promoted to %s once a key %s", p.To, strings.Join(when, " or "))
		}
		fmt.Fprintln(out)
	}
	tiers := []string{""}
	for _, t := range cfg.Tiers {
		tiers = append(tiers, t.Name)
	}
	for _, tier := range tiers {
		t := cfg.SessionTerms(tier)
		who := "sessions"
		if tier != "" {
			who = "sessions of tier " + tier
		}
		fmt.Fprintf(out, "%s: model %s, at most %v, %s turns, %s tokens, %s, %s input tokens per call; %d open per user\n",
			who, t.Model, t.MaxDuration, ceiling(t.MaxTurns), ceiling(t.MaxTokens), costCeiling(t.MaxCost), ceiling(t.MaxContext),
			cfg.Sessions.MaxOpenPerUser)
	}
	if cfg.PreAuthPerMinute > 0 {
		fmt.Fprintf(out, "before authentication: %d requests per minute per client address, per replica\n", cfg.PreAuthPerMinute)
	}
	for _, warning := range append(cfg.Warnings(), stale...) {
		fmt.Fprintln(out, "warning:", warning)
	}
	return nil
}

// costCeiling writes a session's cost ceiling in dollars, 0 being none.
func costCeiling(micro int64) string {
	if micro == 0 {
		return "unlimited"
	}
	return "$" + config.Dollars(micro).Cents()
}

// priceListReport says which models took their price from the price list
// kept in the repository, and warns, when some did, that the list is older
// than config.PriceListMaxAge at now.
func priceListReport(cfg *config.Config, now time.Time) (listed, warnings []string) {
	list := config.KnownPrices()
	for i := range cfg.Models {
		m := &cfg.Models[i]
		l := m.PriceListed()
		if l == nil {
			continue
		}
		p := m.Price
		listed = append(listed, fmt.Sprintf("price of model %s from the price list (%s, checked %s): $%s input, $%s cached input, $%s cache write, $%s output per million tokens; source %s",
			m.Name, l.Name, list.Checked.Format(time.DateOnly), p.Input, *p.CachedInput, *p.CacheWrite, p.Output, l.Source))
	}
	if age := list.Age(now); len(listed) > 0 && age > config.PriceListMaxAge {
		warnings = append(warnings, fmt.Sprintf("the price list was checked %s, %d days ago: its prices may be stale; give these models a price in the config, or update config/prices.yaml",
			list.Checked.Format(time.DateOnly), int(age.Hours()/24)))
	}
	return listed, warnings
}

// ceiling writes a session ceiling, 0 being none.
func ceiling(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10)
}

// describeTenantModel says which model a tenant model serves to whom, most
// specific route first.
func describeTenantModel(t config.TenantModel) string {
	rank := func(r config.TenantRoute) int {
		n := 0
		if r.Workspace != "" {
			n += 4
		}
		if r.Org != "" {
			n += 2
		}
		if r.Tier != "" {
			n++
		}
		return n
	}
	routes := slices.Clone(t.Routes)
	slices.SortStableFunc(routes, func(a, b config.TenantRoute) int { return rank(b) - rank(a) })
	var parts []string
	for _, r := range routes {
		var who []string
		for _, a := range [][2]string{{"org", r.Org}, {"workspace", r.Workspace}, {"tier", r.Tier}} {
			if a[1] != "" {
				who = append(who, a[0]+" "+a[1])
			}
		}
		parts = append(parts, strings.Join(who, ", ")+" -> "+r.Model)
	}
	if t.Default != "" {
		parts = append(parts, "anyone else -> "+t.Default)
	} else {
		parts = append(parts, "anyone else: unknown (404)")
	}
	return strings.Join(parts, "; ")
}
