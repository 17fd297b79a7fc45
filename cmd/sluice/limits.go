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
)

const limitsUsage = `usage:
  sluice limits show  [--org O] --workspace W [--user U] [--key K] [--json]
  sluice limits set   [--org O] (--workspace W | --user U | --key K) --rule R --limit N|inherit [--burst N|inherit] [--expires 24h|RFC3339]
  sluice limits unset [--org O] (--workspace W | --user U | --key K) --rule R
A limit of 0 disables the rule for that subject; inherit takes the rule's own value.
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
	limit := fs.String("limit", "", "the override's limit: a whole number, 0 to disable, or inherit (set)")
	burst := fs.String("burst", "inherit", "the override's burst: a whole number or inherit (set)")
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
		body := map[string]any{"rule": *rule, "attribute": attribute, "value": value, "org": *org}
		if body["limit"], err = limitValue("limit", *limit); err != nil {
			return err
		}
		if body["burst"], err = limitValue("burst", *burst); err != nil {
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

// limitValue reads a limit flag: a whole number, or "inherit" for null.
func limitValue(name, s string) (*int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return nil, fmt.Errorf("--%s is required: a whole number, 0 to disable, or inherit", name)
	case "inherit", "null":
		return nil, nil
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
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
	if p, ok := v.(*int64); ok && p != nil {
		if *p == 0 {
			return "0 (disabled)"
		}
		return count(*p)
	}
	return "inherited"
}

// limitRow is one entry of GET /admin/v1/effective.
type limitRow struct {
	Rule      string    `json:"rule"`
	Kind      string    `json:"kind"`
	Subject   string    `json:"subject"`
	Metric    string    `json:"metric"`
	Limit     int64     `json:"limit"`
	Window    string    `json:"window"`
	Period    string    `json:"period"`
	Source    string    `json:"source"`
	Mode      string    `json:"mode"`
	Used      int64     `json:"used"`
	Reserved  *int64    `json:"reserved"`
	Remaining int64     `json:"remaining"`
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
			reserved = count(*l.Reserved)
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
			count(l.Limit), count(l.Used), reserved, count(l.Remaining), source, resets)
	}
	if len(resp.Limits) == 0 {
		fmt.Fprintln(w, "no limit applies")
	}
	return w.Flush()
}
