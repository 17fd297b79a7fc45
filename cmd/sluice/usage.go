package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
)

// adminCommand runs "sluice usage" and "sluice limits ...", which talk to
// a running server's admin API.
func adminCommand(name string, args []string) error {
	return runAdminCommand(os.Stdout, name, args)
}

func runAdminCommand(out io.Writer, name string, args []string) error {
	switch name {
	case "usage":
		return usageCommand(out, args)
	case "limits":
		return limitsCommand(out, args)
	}
	return fmt.Errorf("unknown command %q", name)
}

// adminClient calls the admin API with the token from $SLUICE_ADMIN_TOKEN.
type adminClient struct {
	base   string
	token  string
	client *http.Client
}

// adminFlags registers --admin-url and --json.
func adminFlags(fs *flag.FlagSet) (adminURL *string, asJSON *bool) {
	def := "http://" + config.DefaultAdminListen
	if v := os.Getenv(config.VarAdminListen); v != "" {
		def = "http://" + v
	}
	adminURL = fs.String("admin-url", def, "admin API of the running server (token from $SLUICE_ADMIN_TOKEN)")
	asJSON = fs.Bool("json", false, "print the API's JSON instead of a table")
	return adminURL, asJSON
}

func newAdminClient(base string) (*adminClient, error) {
	token := os.Getenv("SLUICE_ADMIN_TOKEN")
	if token == "" {
		return nil, errors.New("SLUICE_ADMIN_TOKEN is not set: the admin API needs a token (the server prints one in development)")
	}
	if _, err := url.Parse(base); err != nil || !strings.HasPrefix(base, "http") {
		return nil, fmt.Errorf("--admin-url %q: want http://host:port", base)
	}
	return &adminClient{base: strings.TrimSuffix(base, "/"), token: token, client: &http.Client{Timeout: 30 * time.Second}}, nil
}

// call sends a request with an optional JSON body and returns the answer's
// body; an error answer becomes an error carrying the API's message.
func (c *adminClient) call(method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("%s: %s", resp.Status, e.Error.Message)
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	return data, nil
}

// usageCommand prints the ledger: sluice usage [--workspace W] [--from D]
// [--to D] [--group-by day,route,model,key,user,team,tag,kind] [--json].
func usageCommand(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	adminURL, asJSON := adminFlags(fs)
	workspace := fs.String("workspace", "", "only this workspace (a viewer token needs it when it reads several)")
	from := fs.String("from", "", "first day, YYYY-MM-DD (default: 30 days ago)")
	to := fs.String("to", "", "last day, YYYY-MM-DD (default: today)")
	groupBy := fs.String("group-by", "day", "comma-separated: "+strings.Join(catalog.UsageGroups, ", ")+" (empty: one total; by tag, a call with several tags counts in each)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *from == "" {
		*from = time.Now().UTC().AddDate(0, 0, -29).Format(time.DateOnly)
	}
	c, err := newAdminClient(*adminURL)
	if err != nil {
		return err
	}
	q := url.Values{"from": {*from}}
	for k, v := range map[string]string{"workspace": *workspace, "to": *to, "group_by": *groupBy} {
		if v != "" {
			q.Set(k, v)
		}
	}
	data, err := c.call(http.MethodGet, "/admin/v1/usage?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := out.Write(data)
		return err
	}
	var resp struct {
		Usage []catalog.UsageRow `json:"usage"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	var groups []string
	if *groupBy != "" {
		groups = strings.Split(*groupBy, ",")
	}
	printUsage(out, resp.Usage, groups)
	return nil
}

func printUsage(out io.Writer, rows []catalog.UsageRow, groups []string) {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	var header []string
	for _, g := range groups {
		header = append(header, strings.ToUpper(g))
	}
	header = append(header, "REQUESTS", "INPUT", "OUTPUT", "CACHED", "COST")
	fmt.Fprintln(w, strings.Join(header, "\t")+"\t")
	var total catalog.UsageRow
	for _, r := range rows {
		var cells []string
		for _, g := range groups {
			cells = append(cells, usageCell(&r, g))
		}
		cells = append(cells, count(r.Requests), count(r.InputTokens), count(r.OutputTokens), count(r.CachedInputTokens), dollars(r.CostMicros))
		fmt.Fprintln(w, strings.Join(cells, "\t")+"\t")
		total.Requests += r.Requests
		total.InputTokens += r.InputTokens
		total.OutputTokens += r.OutputTokens
		total.CachedInputTokens += r.CachedInputTokens
		total.CostMicros += r.CostMicros
	}
	if len(groups) > 0 && len(rows) > 1 {
		cells := make([]string, len(groups))
		cells[0] = "total"
		cells = append(cells, count(total.Requests), count(total.InputTokens), count(total.OutputTokens), count(total.CachedInputTokens), dollars(total.CostMicros))
		fmt.Fprintln(w, strings.Join(cells, "\t")+"\t")
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "no usage recorded in that range\t")
	}
	_ = w.Flush()
}

// usageCell is the column of r that grouping g fills; an empty value (no
// key, no tag) shows as "-".
func usageCell(r *catalog.UsageRow, g string) string {
	v := map[string]string{"org": r.Org, "workspace": r.Workspace, "day": r.Day, "route": r.Route, "model": r.Model,
		"key": r.Key, "user": r.User, "team": r.Team, "tag": r.Tag, "kind": r.Kind}[g]
	if v == "" {
		return "-"
	}
	return v
}

// count writes n with thousands separators.
func count(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
}

// dollars writes micro-dollars exactly, at least to the cent: "$12.50",
// "$0.000042" (spend under a cent is not $0.00).
func dollars(micros int64) string { return "$" + config.Dollars(micros).Cents() }
