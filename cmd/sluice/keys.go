package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
)

// keys runs "sluice keys create|list|update|revoke", against the data
// directory, or against a running server's admin API with --admin-url.
func keys(args []string) error { return keysTo(os.Stdout, args) }

// keysTo is keys, writing to out.
func keysTo(out io.Writer, args []string) error {
	if len(args) == 0 {
		return errors.New("want create, list, update or revoke")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	var c common
	c.register(fs)
	adminURL := fs.String("admin-url", "", "admin API of a running server (token from $SLUICE_ADMIN_TOKEN); default: the data directory")
	var req keyRequest
	models := fs.String("models", "", "comma-separated models the key may use (default: all)")
	var assert, assertWorkspaces string
	if sub == "create" {
		fs.StringVar(&req.Workspace, "workspace", "", "workspace (required)")
		fs.StringVar(&req.User, "user", "", "user (required)")
		fs.StringVar(&req.Org, "org", "", "organisation (default \"default\")")
		fs.StringVar(&req.Team, "team", "", "team")
		fs.StringVar(&req.Tier, "tier", "", "tier")
		fs.StringVar(&req.Name, "name", "", "a name to recognise the key by")
		fs.StringVar(&assert, "assert", "", "make a service key: comma-separated attributes (workspace,user,team) it may assert per request with X-Sluice-Workspace, X-Sluice-User, X-Sluice-Team")
		fs.StringVar(&assertWorkspaces, "assert-workspaces", "", "comma-separated workspaces a service key may assert, each a name or a prefix ending in * (default: any in its org)")
		fs.BoolVar(&req.NoCache, "no-cache", false, "keep the key's calls out of the response cache: they never read nor write it")
		fs.BoolVar(&req.Turns, "turns", false, "let the key group its calls into turns with X-Sluice-Turn: a requests rate rule charges a turn once (up to 64 calls); without it every call is charged")
	}
	if sub == "update" {
		fs.StringVar(&req.Tier, "tier", "", "the key's new tier (\"\": none)")
		fs.StringVar(&req.Name, "name", "", "the key's new name")
	}
	var maxWait time.Duration
	if sub == "create" || sub == "update" {
		fs.StringVar(&req.Class, "class", "", "priority class on rules with classes (default, or \"\": the tier's)")
		fs.Func("max-wait", "the longest the key's calls may wait for rate and concurrency rules, such as 2s or 500ms (default, or 0: the tier's)", func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("want a duration such as 2s or 500ms, got %q", v)
			}
			maxWait, req.MaxWait = d, d.String()
			return nil
		})
	}
	limits := keyLimitFlags{}
	if sub == "create" {
		limits.register(fs)
	}
	workspace := ""
	if sub == "list" {
		fs.StringVar(&workspace, "workspace", "", "only this workspace")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *models != "" {
		req.AllowedModels = strings.Split(*models, ",")
	}
	req.Assert, req.AssertWorkspaces = splitList(assert), splitList(assertWorkspaces)
	if len(limits) > 0 {
		if *adminURL == "" {
			return errors.New("keys create: --rpm, --tpm, --max-in-flight and --budget-* need --admin-url: the running server stores a key's limits and applies them at once")
		}
		req.Limits = limits.request()
	}
	// What update changes: the flags given.
	var change catalog.KeyUpdate
	if sub == "update" {
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "name":
				change.Name = &req.Name
			case "tier":
				change.Tier = &req.Tier
			case "models":
				change.AllowedModels = &req.AllowedModels
			case "class":
				change.Class = &req.Class
			case "max-wait":
				change.MaxWait = &maxWait
			}
		})
		if change == (catalog.KeyUpdate{}) {
			return errors.New("keys update: give what to change: --name, --tier, --models, --class or --max-wait")
		}
	}
	if *adminURL != "" {
		return keysRemote(out, sub, *adminURL, req, change, workspace, fs.Args())
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	cat, err := openCatalog(cfg)
	if err != nil {
		return err
	}
	defer cat.Close()
	ctx := context.Background()
	switch sub {
	case "create":
		if req.Workspace == "" || req.User == "" {
			return errors.New("--workspace and --user are required")
		}
		if err := cfg.CheckKey(req.Tier, req.AllowedModels); err != nil {
			return fmt.Errorf("keys create: %w", err)
		}
		secret, key, err := cat.CreateKey(ctx, catalog.Key{Org: req.Org, Workspace: req.Workspace, Team: req.Team, User: req.User,
			Tier: req.Tier, Name: req.Name, AllowedModels: req.AllowedModels, Assert: req.Assert, AssertWorkspaces: req.AssertWorkspaces,
			Class: req.Class, MaxWait: sluice.Duration(maxWait), Turns: req.Turns, NoCache: req.NoCache}, "cli")
		if err != nil {
			return err
		}
		rows, err := localAlsoApplies(ctx, cfg, cat, key)
		if err != nil {
			return fmt.Errorf("key %s created; %w", key.ID, err)
		}
		printAlsoApplies(out, nil, rows)
		printCreated(out, key.ID, key.Workspace, key.User, secret)
	case "update":
		if fs.NArg() != 1 {
			return errors.New("want the key id")
		}
		// The tier and models given; those the key keeps were checked when
		// they were set.
		if err := cfg.CheckKey(req.Tier, req.AllowedModels); err != nil {
			return fmt.Errorf("keys update: %w", err)
		}
		key, err := cat.UpdateKey(ctx, fs.Arg(0), change, "cli")
		if err != nil {
			return err
		}
		printKeys(out, []catalog.Key{key})
	case "list":
		list, err := cat.ListKeys(ctx, workspace)
		if err != nil {
			return err
		}
		printKeys(out, list)
	case "revoke":
		if fs.NArg() != 1 {
			return errors.New("want the key id")
		}
		if err := cat.RevokeKey(ctx, fs.Arg(0), "cli"); err != nil {
			return err
		}
		fmt.Fprintln(out, "revoked", fs.Arg(0))
	default:
		return fmt.Errorf("unknown subcommand %q: want create, list, update or revoke", sub)
	}
	return nil
}

// patchOf is the body of PATCH /admin/v1/keys/{id} that makes change: its
// fields given, an empty model list as [] (any model).
func patchOf(change catalog.KeyUpdate) map[string]any {
	body := map[string]any{}
	if change.Name != nil {
		body["name"] = *change.Name
	}
	if change.Tier != nil {
		body["tier"] = *change.Tier
	}
	if change.AllowedModels != nil {
		body["allowed_models"] = append([]string{}, *change.AllowedModels...)
	}
	if change.Class != nil {
		body["class"] = *change.Class
	}
	if change.MaxWait != nil {
		body["max_wait"] = change.MaxWait.String()
	}
	return body
}

// adminMessage returns the message of an admin API error body, or the body
// itself when it is not one.
func adminMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return strings.TrimSpace(string(body))
}

// keyLimitFlags are the key's own limits given to "sluice keys create", by
// their field in the limits object of POST /admin/v1/keys.
type keyLimitFlags map[string]string

func (l keyLimitFlags) register(fs *flag.FlagSet) {
	for _, f := range []struct{ flag, field, usage string }{
		{"rpm", "requests_per_minute", "the key's own requests per minute"},
		{"tpm", "tokens_per_minute", "the key's own tokens per minute"},
		{"max-in-flight", "max_in_flight", "the key's own calls in flight"},
		{"budget-dollars", "budget.dollars", "the key's own budget in dollars per --budget-period"},
		{"budget-tokens", "budget.tokens", "the key's own budget in tokens per --budget-period"},
		{"budget-period", "budget.period", "day, week or month (default month)"},
	} {
		fs.Func(f.flag, f.usage, func(v string) error {
			if f.field != "budget.period" && f.field != "budget.dollars" {
				if _, err := strconv.ParseInt(v, 10, 64); err != nil {
					return fmt.Errorf("want a whole number, got %q", v)
				}
			}
			l[f.field] = v
			return nil
		})
	}
}

// request returns the limits object: the whole numbers as JSON numbers,
// dollars as the decimal written (the server reads it exactly), the
// budget's period month by default.
func (l keyLimitFlags) request() map[string]any {
	out := map[string]any{}
	budget := map[string]any{}
	for field, v := range l {
		var value any = json.Number(v)
		if field == "budget.period" || field == "budget.dollars" {
			value = v
		}
		if name, ok := strings.CutPrefix(field, "budget."); ok {
			budget[name] = value
		} else {
			out[field] = value
		}
	}
	if len(budget) > 0 {
		if _, ok := budget["period"]; !ok {
			budget["period"] = "month"
		}
		out["budget"] = budget
	}
	return out
}

// printCreated prints a new key, the secret alone on the last line.
func printCreated(out io.Writer, id, workspace, user, secret string) {
	fmt.Fprintf(out, "created key %s for workspace %q, user %q; the secret is shown once:\n%s\n", id, workspace, user, secret)
}

// printKeys prints one key a line: "-" stands for no name, no tier, any
// model, the tier's class and max wait.
func printKeys(out io.Writer, list []catalog.Key) {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAME\tORG\tWORKSPACE\tUSER\tTIER\tMODELS\tCREATED\tSTATUS\tASSERTS\tCLASS\tMAX_WAIT")
	for _, k := range list {
		status := "active"
		if !k.RevokedAt.IsZero() {
			status = "revoked"
		} else if !k.ExpiresAt.IsZero() && k.ExpiresAt.Before(time.Now()) {
			status = "expired"
		}
		maxWait := "-"
		if k.MaxWait > 0 {
			maxWait = k.MaxWait.String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, orDash(k.Name), k.Org, k.Workspace, k.User, orDash(k.Tier),
			orDash(strings.Join(k.AllowedModels, ",")), k.CreatedAt.UTC().Format(time.RFC3339), status, asserts(k), orDash(k.Class), maxWait)
	}
	_ = w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// asserts describes what a service key may assert: "workspace,user in
// ws-a,team-*", or "-" for a plain key.
func asserts(k catalog.Key) string {
	if len(k.Assert) == 0 {
		return "-"
	}
	s := strings.Join(k.Assert, ",")
	if len(k.AssertWorkspaces) > 0 {
		s += " in " + strings.Join(k.AssertWorkspaces, ",")
	}
	return s
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// keysRemote runs the subcommand through the admin API at base: change is
// what an update changes.
func keysRemote(stdout io.Writer, sub, base string, req keyRequest, change catalog.KeyUpdate, workspace string, args []string) error {
	base = strings.TrimSuffix(base, "/")
	var method, url string
	var body io.Reader
	switch sub {
	case "create":
		b, _ := json.Marshal(req)
		method, url, body = http.MethodPost, base+"/admin/v1/keys", bytes.NewReader(b)
	case "update":
		if len(args) != 1 {
			return errors.New("want the key id")
		}
		b, _ := json.Marshal(patchOf(change))
		method, url, body = http.MethodPatch, base+"/admin/v1/keys/"+args[0], bytes.NewReader(b)
	case "list":
		method, url = http.MethodGet, base+"/admin/v1/keys?workspace="+workspace
	case "revoke":
		if len(args) != 1 {
			return errors.New("want the key id")
		}
		method, url = http.MethodDelete, base+"/admin/v1/keys/"+args[0]
	default:
		return fmt.Errorf("unknown subcommand %q", sub)
	}
	r, err := http.NewRequest(method, url, body)
	if err != nil {
		return err
	}
	r.Header.Set("Authorization", "Bearer "+os.Getenv("SLUICE_ADMIN_TOKEN"))
	r.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s: %s", resp.Status, adminMessage(data))
	}
	switch sub {
	case "create":
		var out struct {
			Key       catalog.Key `json:"key"`
			Secret    string      `json:"secret"`
			Overrides []struct {
				Rule  string          `json:"rule"`
				Limit json.RawMessage `json:"limit"`
			} `json:"overrides"`
			AlsoApplies []limitRow `json:"also_applies"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			return err
		}
		var own []string
		for _, o := range out.Overrides {
			var limit amount
			if err := limit.UnmarshalJSON(o.Limit); err != nil {
				return err
			}
			own = append(own, o.Rule+" "+string(limit))
		}
		printAlsoApplies(stdout, own, out.AlsoApplies)
		printCreated(stdout, out.Key.ID, out.Key.Workspace, out.Key.User, out.Secret)
	case "list":
		var out struct {
			Keys []catalog.Key `json:"keys"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			return err
		}
		printKeys(stdout, out.Keys)
	case "update":
		var out struct {
			Key catalog.Key `json:"key"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			return err
		}
		printKeys(stdout, []catalog.Key{out.Key})
	case "revoke":
		fmt.Fprintln(stdout, "revoked", args[0])
	}
	return nil
}

// printAlsoApplies writes, before a new key's secret, its own limits
// (own, "rule limit") and the other rules in force that apply to its
// calls (rows), each with its source and, for a built-in rule, how to
// turn it off.
func printAlsoApplies(out io.Writer, own []string, rows []limitRow) {
	if len(own) > 0 {
		fmt.Fprintf(out, "The key's own limits: %s\n", strings.Join(own, ", "))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out, "Rules in force that also apply to its calls:")
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  RULE\tKIND\tSUBJECT\tMETRIC\tPER\tLIMIT\tSOURCE")
	for _, l := range rows {
		per := cmp.Or(l.Period, l.Window, "-")
		source := l.Source
		if v := config.KnobVariable(l.Rule); v != "" && (source == config.SourceDefault || source == config.SourceEnv) {
			source += " (" + v + "=0 turns it off)"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Rule, l.Kind, l.Subject, l.Metric, per, l.Limit, source)
	}
	_ = w.Flush()
}

// localAlsoApplies is what "also applies" to key k when keys create writes
// the catalog itself: the rules in force for cfg and the catalog's stored
// rules and overrides, as the server would resolve them.
func localAlsoApplies(ctx context.Context, cfg *config.Config, cat *catalog.Catalog, k catalog.Key) ([]limitRow, error) {
	p, _, err := admin.LoadPolicy(ctx, cat, cfg.Layers(), cfg.SluiceTiers())
	if err != nil {
		return nil, err
	}
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{})})
	if err == nil {
		err = l.SetPolicy(p)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve the rules in force: %w", err)
	}
	eff, err := l.Effective(ctx, sluice.Identity{Org: k.Org, Workspace: k.Workspace, Team: k.Team, User: k.User, Tier: k.Tier, Key: k.ID})
	if err != nil {
		return nil, fmt.Errorf("resolve the rules in force: %w", err)
	}
	byName := map[string]sluice.Rule{}
	for _, r := range p.Rules {
		byName[r.Name] = r
	}
	rows := make([]limitRow, 0, len(eff))
	for _, e := range eff {
		row := limitRow{Rule: e.Rule, Kind: string(e.Kind), Subject: e.Subject, Metric: string(e.Metric), Source: e.Source, Mode: string(e.Mode),
			Limit: amount(count(e.Limit))}
		if e.Metric == sluice.MetricCost {
			row.Limit = amount("$" + config.Dollars(e.Limit).String())
		}
		if r := byName[e.Rule]; r.Window > 0 {
			row.Window = r.Window.String()
		} else {
			row.Period = string(r.Period)
		}
		rows = append(rows, row)
	}
	return rows, nil
}
