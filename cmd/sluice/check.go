package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluicehq/sluice/config"
)

// check validates a config and prints the effective limits and warnings.
func check(args []string) error {
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
	fmt.Println("config is valid")
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tKIND\tSUBJECT\tMETRIC\tLIMIT\tPER\tSOURCE\tSTATE")
	for _, r := range cfg.EffectiveRules() {
		per := r.Window.String()
		if r.Kind == "budget" {
			per = string(r.Period)
		} else if r.Kind == "concurrency" {
			per = "in flight"
		}
		state := "enforce"
		switch {
		case r.Disabled || r.Limit == 0:
			state = "disabled"
		case r.Mode == "shadow":
			state = "shadow"
		}
		metric := string(r.Metric)
		if metric == "" {
			metric = "requests"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, r.Kind, r.Subject, metric, r.Limit, per, r.Source, state)
	}
	_ = w.Flush()
	fmt.Println()
	for _, m := range cfg.Models {
		fmt.Printf("model %s (provider %s): max output %d tokens\n", m.Name, m.Provider, m.MaxOutputTokens)
	}
	for _, t := range cfg.TenantModels {
		fmt.Printf("tenant model %s: %s\n", t.Name, describeTenantModel(t))
	}
	for _, t := range cfg.Tiers {
		fmt.Printf("tier %s: %d%% of each limit", t.Name, t.Percent)
		if t.Promote != nil {
			fmt.Printf(", promoted to %s once a key is %v old", t.Promote.To, t.Promote.After)
		}
		fmt.Println()
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
		fmt.Printf("%s: model %s, at most %v, %s turns, %s tokens, %s micro-dollars, %s input tokens per call; %d open per user\n",
			who, t.Model, t.MaxDuration, ceiling(t.MaxTurns), ceiling(t.MaxTokens), ceiling(t.MaxCost), ceiling(t.MaxContext),
			cfg.Sessions.MaxOpenPerUser)
	}
	if cfg.PreAuthPerMinute > 0 {
		fmt.Printf("before authentication: %d requests per minute per client address, per replica\n", cfg.PreAuthPerMinute)
	}
	for _, warning := range cfg.Warnings() {
		fmt.Println("warning:", warning)
	}
	return nil
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
