package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

const limitsUsage = `usage:
  sluice limits show  [--org O] --workspace W [--user U] [--key K] [--json]
  sluice limits set   [--org O] (--workspace W | --user U | --key K) --rule R --limit N|inherit [--burst N|inherit] [--expires 24h|RFC3339]
  sluice limits unset [--org O] (--workspace W | --user U | --key K) --rule R
show names at least one subject: --workspace, --user, --key or --org.
A limit of 0 disables the rule for that subject; inherit takes the rule's own value.
A cost rule's limit is dollars: 12.50 or '$12.50'; other rules' a whole number.
--org names the org of the workspace or user (default "default").`

// limitsCommand runs "sluice limits show|set|unset" against the admin API.
func limitsCommand(out io.Writer, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		return errors.New(limitsUsage)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("limits "+sub, flag.ContinueOnError)
	adminURL, asJSON := adminFlags(fs)
	org := fs.String("org", "", "the org of the workspace or user (default \"default\")")
	workspace := fs.String("workspace", "", "workspace")
	user := fs.String("user", "", "user")
	key := fs.String("key", "", "key ID")
	rule := fs.String("rule", "", "rule name (set, unset)")
	limit := fs.String("limit", "", "the override's limit: a whole number (dollars, 12.50, on a cost rule), 0 to disable, or inherit (set)")
	burst := fs.String("burst", "inherit", "the override's burst: a whole number (dollars on a cost rule) or inherit (set)")
	expires := fs.String("expires", "", "when the override ends: a duration from now (24h) or an RFC 3339 time (set)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c, err := newAdminClient(*adminURL)
	if err != nil {
		return err
	}
	switch sub {
	case "show":
		if *org == "" && *workspace == "" && *user == "" && *key == "" {
			return errors.New("limits show names a subject: --workspace, --user, --key or --org\n" + limitsUsage)
		}
		return limitsShow(out, c, *org, *workspace, *user, *key, *asJSON)
	case "set", "unset":
		attribute, value, err := oneSubject(*workspace, *user, *key)
		if err != nil {
			return err
		}
		if *rule == "" {
			return errors.New("--rule is required")
		}
		if sub == "unset" {
			path := "/admin/v1/overrides/" + url.PathEscape(*rule) + "/" + attribute + "/" + url.PathEscape(value)
			if *org != "" {
				path += "?org=" + url.QueryEscape(*org)
			}
			if _, err := c.call(http.MethodDelete, path, nil); err != nil {
				return err
			}
			fmt.Fprintf(out, "override of %s for %s %s removed; the rule's own limit applies\n", *rule, attribute, value)
			return nil
		}
		cost, err := ruleIsCost(c, *org, *rule)
		if err != nil {
			return err
		}
		body := map[string]any{"rule": *rule, "attribute": attribute, "value": value, "org": *org}
		if body["limit"], err = limitValue("limit", *limit, cost); err != nil {
			return err
		}
		if body["burst"], err = limitValue("burst", *burst, cost); err != nil {
			return err
		}
		if *expires != "" {
			at, err := expiry(*expires)
			if err != nil {
				return err
			}
			body["expires_at"] = at
		}
		data, err := c.call(http.MethodPut, "/admin/v1/overrides", body)
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := out.Write(data)
			return err
		}
		fmt.Fprintf(out, "override of %s for %s %s set: limit %s, burst %s; it applies from the next request\n",
			*rule, attribute, value, describe(body["limit"]), describe(body["burst"]))
		return nil
	}
	return fmt.Errorf("unknown subcommand %q\n%s", sub, limitsUsage)
}

// oneSubject returns the one subject named by the flags.
func oneSubject(workspace, user, key string) (attribute, value string, err error) {
	n := 0
	for _, s := range []struct{ attr, v string }{{"workspace", workspace}, {"user", user}, {"key", key}} {
		if s.v != "" {
			attribute, value = s.attr, s.v
			n++
		}
	}
	if n != 1 {
		return "", "", errors.New("name exactly one subject: --workspace, --user or --key")
	}
	return attribute, value, nil
}

// ruleIsCost reports whether the rule in force named name (in org, or
// the deployment's) counts money, as the admin API's policy says. A rule
// not in force is not cost: the server then names what is wrong.
func ruleIsCost(c *adminClient, org, name string) (bool, error) {
	path := "/admin/v1/rules"
	if org != "" {
		path += "?org=" + url.QueryEscape(org)
	}
	data, err := c.call(http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	var resp struct {
		Policy []struct {
			Name   string `json:"name"`
			Org    string `json:"org"`
			Metric string `json:"metric"`
		} `json:"policy"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return false, fmt.Errorf("read the rules: %w", err)
	}
	cost := false
	for _, r := range resp.Policy {
		if r.Name == name && (r.Org == org || r.Org == "") {
			// An org's own rule of that name shadows the deployment's.
			cost = r.Metric == string(sluice.MetricCost)
			if r.Org == org {
				break
			}
		}
	}
	return cost, nil
}

// limitValue reads a limit flag: a whole number, or "inherit" for null.
// On a cost rule (cost) it is dollars, "12.50" or "$12.50", sent as the
// admin API takes them: a string of dollars.
func limitValue(name, s string, cost bool) (any, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return nil, fmt.Errorf("--%s is required: a whole number (dollars on a cost rule), 0 to disable, or inherit", name)
	case "inherit", "null":
		return nil, nil
	}
	plain := strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	if cost {
		if strings.HasPrefix(plain, "-") {
			return nil, fmt.Errorf("--%s %s: must not be negative (0 disables)", name, s)
		}
		d, err := config.ParseDollars(strings.TrimPrefix(plain, "$"))
		if err != nil {
			return nil, fmt.Errorf("--%s %q: the rule counts money; want dollars (12.50 or '$12.50'), 0 to disable, or inherit: %w", name, s, err)
		}
		return "$" + d.String(), nil
	}
	n, err := strconv.ParseInt(plain, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: want a whole number, 0 to disable, or inherit", name, s)
	}
	if n < 0 {
		return nil, fmt.Errorf("--%s %d: must not be negative (0 disables)", name, n)
	}
	return &n, nil
}

func expiry(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return time.Now().Add(d).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--expires %q: want a duration from now (24h) or an RFC 3339 time", s)
}

func describe(v any) string {
	switch v := v.(type) {
	case *int64:
		if v == nil {
			break
		}
		if *v == 0 {
			return "0 (disabled)"
		}
		return count(*v)
	case string:
		if v == "$0" {
			return "$0 (disabled)"
		}
		return v
	}
	return "inherited"
}

// amount is a limit, usage or headroom as GET /admin/v1/effective writes
// it: a count (a JSON number), or money in dollars on a cost rule (a
// string, "$12.5"). It prints as the table shows it.
type amount string

func (a *amount) UnmarshalJSON(b []byte) error {
	var text string
	if json.Unmarshal(b, &text) == nil {
		*a = amount(text)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("an amount is a whole number or dollars: %w", err)
	}
	*a = amount(count(n))
	return nil
}

// limitRow is one entry of GET /admin/v1/effective.
type limitRow struct {
	Rule      string    `json:"rule"`
	Kind      string    `json:"kind"`
	Subject   string    `json:"subject"`
	Metric    string    `json:"metric"`
	Limit     amount    `json:"limit"`
	Window    string    `json:"window"`
	Period    string    `json:"period"`
	Source    string    `json:"source"`
	Mode      string    `json:"mode"`
	Used      amount    `json:"used"`
	Reserved  *amount   `json:"reserved"`
	Remaining amount    `json:"remaining"`
	ResetAt   time.Time `json:"reset_at"`
}

func limitsShow(out io.Writer, c *adminClient, org, workspace, user, key string, asJSON bool) error {
	q := url.Values{}
	for k, v := range map[string]string{"org": org, "workspace": workspace, "user": user, "key": key} {
		if v != "" {
			q.Set(k, v)
		}
	}
	data, err := c.call(http.MethodGet, "/admin/v1/effective?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := out.Write(data)
		return err
	}
	var resp struct {
		Identity map[string]string `json:"identity"`
		Limits   []limitRow        `json:"limits"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	var who []string
	for _, k := range []string{"org", "workspace", "team", "user", "key", "tier"} {
		if v := resp.Identity[k]; v != "" {
			who = append(who, k+"="+v)
		}
	}
	fmt.Fprintf(out, "limits for %s\n", strings.Join(who, " "))
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tKIND\tSUBJECT\tMETRIC\tPER\tLIMIT\tUSED\tRESERVED\tREMAINING\tSOURCE\tRESETS (UTC)")
	for _, l := range resp.Limits {
		per := l.Window
		if l.Period != "" {
			per = l.Period
		}
		if per == "" {
			per = "-"
		}
		reserved := "-"
		if l.Reserved != nil {
			reserved = string(*l.Reserved)
		}
		resets := "-"
		if !l.ResetAt.IsZero() {
			resets = l.ResetAt.UTC().Format("2006-01-02 15:04:05")
		}
		source := l.Source
		if l.Mode == "shadow" {
			source += " (shadow)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Rule, l.Kind, l.Subject, l.Metric, per,
			l.Limit, l.Used, reserved, l.Remaining, source, resets)
	}
	if len(resp.Limits) == 0 {
		fmt.Fprintln(w, "no limit applies")
	}
	return w.Flush()
}
