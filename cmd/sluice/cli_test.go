package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
)

// adminServer runs the admin API in process over a fresh catalog and a
// memory-store limiter with the default configuration's rules.
func adminServer(t *testing.T) (*httptest.Server, *catalog.Catalog, *sluice.Limiter) {
	t.Helper()
	srv, cat, l := newAdminServer(t)
	t.Setenv("SLUICE_ADMIN_TOKEN", adminServerToken)
	return srv, cat, l
}

// adminServerToken is the admin token of the servers adminServer starts.
const adminServerToken = "cli-test-token"

// newAdminServer is adminServer without setting SLUICE_ADMIN_TOKEN, for a
// parallel test that gives the token to the processes it starts.
func newAdminServer(t *testing.T) (*httptest.Server, *catalog.Catalog, *sluice.Limiter) {
	t.Helper()
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	cfg := config.Default()
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: cfg.EffectiveRules()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Options{Catalog: cat, Limiter: l, AdminToken: adminServerToken, OnChange: func() {
		p, _, err := admin.LoadPolicy(context.Background(), cat, cfg.Layers(), nil)
		if err == nil {
			err = l.SetPolicy(p)
		}
		if err != nil {
			t.Error(err)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, cat, l
}

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runAdminCommand(&out, args[0], args[1:])
	return out.String(), err
}

func TestCLI_LimitsShowSetUnset(t *testing.T) {
	srv, cat, _ := adminServer(t)
	if _, _, err := cat.CreateKey(context.Background(), catalog.Key{Workspace: "acme", User: "ada"}, "test"); err != nil {
		t.Fatal(err)
	}
	url := "--admin-url=" + srv.URL
	out, err := runCLI(t, "limits", "show", url, "--workspace", "acme", "--user", "ada")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"limits for workspace=acme user=ada", "RULE", "daily_token_budget", "2,000,000", "rate_per_minute", "default"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits show lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "limits", "set", url, "--workspace", "acme", "--rule", "daily_token_budget", "--limit", "500,000", "--expires", "24h")
	if err != nil || !strings.Contains(out, "limit 500,000, burst inherited") {
		t.Fatalf("limits set = %q, %v", out, err)
	}
	out, err = runCLI(t, "limits", "show", url, "--workspace", "acme", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var eff struct {
		Limits []struct {
			Rule   string `json:"rule"`
			Limit  int64  `json:"limit"`
			Source string `json:"source"`
		} `json:"limits"`
	}
	if err := json.Unmarshal([]byte(out), &eff); err != nil {
		t.Fatalf("--json is not JSON: %v\n%s", err, out)
	}
	found := false
	for _, l := range eff.Limits {
		if l.Rule == "daily_token_budget" {
			found = l.Limit == 500_000 && l.Source == "override"
		}
	}
	if !found {
		t.Fatalf("after set: %s", out)
	}
	if _, err := runCLI(t, "limits", "unset", url, "--workspace", "acme", "--rule", "daily_token_budget"); err != nil {
		t.Fatal(err)
	}
	overrides, _ := cat.ListOverrides(context.Background())
	if len(overrides) != 0 {
		t.Fatalf("after unset: %+v", overrides)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"limits", "set", url, "--workspace", "ghost", "--rule", "daily_token_budget", "--limit", "5"}, `404 Not Found: set override: unknown subject: no key of org "default" has workspace "ghost"`},
		{[]string{"limits", "set", url, "--workspace", "acme", "--rule", "daily_token_budget", "--limit", "-5"}, "must not be negative"},
		{[]string{"limits", "set", url, "--workspace", "acme", "--user", "ada", "--rule", "x", "--limit", "5"}, "exactly one subject"},
		{[]string{"limits", "set", url, "--workspace", "acme", "--rule", "nope", "--limit", "5"}, `no rule named "nope"`},
		{[]string{"limits", "show", url, "--workspace", "acme", "--key", "nokey"}, "404"},
		{[]string{"limits", "frob", url}, "unknown subcommand"},
	} {
		if _, err := runCLI(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want an error saying %q", tc.args[:2], err, tc.says)
		}
	}
	t.Setenv("SLUICE_ADMIN_TOKEN", "wrong")
	if _, err := runCLI(t, "limits", "show", url, "--workspace", "acme"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v", err)
	}
	t.Setenv("SLUICE_ADMIN_TOKEN", "")
	if _, err := runCLI(t, "usage", url); err == nil || !strings.Contains(err.Error(), "SLUICE_ADMIN_TOKEN") {
		t.Fatalf("no token: %v", err)
	}
}

func TestCLI_Usage(t *testing.T) {
	srv, cat, _ := adminServer(t)
	today := time.Now().UTC()
	for _, e := range []catalog.UsageEntry{
		{Workspace: "acme", Route: "chat", Model: "mock-small", At: today, Requests: 3, InputTokens: 1500, OutputTokens: 200, CostMicros: 1234},
		{Workspace: "acme", Route: "chat", Model: "mock-large", At: today.AddDate(0, 0, -1), Requests: 1, InputTokens: 100, OutputTokens: 50, CostMicros: 99},
		{Workspace: "acme", Route: "chat", Model: "mock-small", At: today.AddDate(0, 0, -40), Requests: 7},
		{Workspace: "acme", Route: "embed", Model: "mock-small", At: today.AddDate(0, 0, -2), Requests: 1, InputTokens: 10, CostMicros: 42},
	} {
		cat.RecordUsage(e)
	}
	if err := cat.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	url := "--admin-url=" + srv.URL
	out, err := runCLI(t, "usage", url, "--workspace", "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DAY", "REQUESTS", today.Format(time.DateOnly), "1,500", "$0.001234", "$0.000042", "total", "$0.001375"} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, today.AddDate(0, 0, -40).Format(time.DateOnly)) {
		t.Errorf("usage shows a day older than 30 days by default:\n%s", out)
	}
	out, err = runCLI(t, "usage", url, "--workspace", "acme", "--group-by", "model", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Usage []catalog.UsageRow `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.Usage) != 2 {
		t.Fatalf("usage --json = %s, %v", out, err)
	}
	if _, err := runCLI(t, "usage", url, "--group-by", "prompt"); err == nil || !strings.Contains(err.Error(), `cannot group by "prompt"`) {
		t.Fatalf("bad group: %v", err)
	}
}

func TestCLI_UsageGroupedByKeyUserTeamTag(t *testing.T) {
	srv, cat, _ := adminServer(t)
	for _, e := range []catalog.UsageEntry{
		{Workspace: "acme", Route: "chat", Model: "m", KeyID: "key-a", User: "ann", Team: "red", Tags: []string{"eval", "nightly"}, Requests: 2, InputTokens: 1000},
		{Workspace: "acme", Route: "chat", Model: "m", KeyID: "key-b", User: "bob", Team: "blue", Tags: []string{"eval"}, Requests: 1, InputTokens: 30},
		{Workspace: "acme", Route: "chat", Model: "m", KeyID: "key-b", User: "bob", Team: "blue", Requests: 5, InputTokens: 7},
	} {
		cat.RecordUsage(e)
	}
	if err := cat.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	url := "--admin-url=" + srv.URL
	for _, tc := range []struct {
		group string
		lines []string
	}{
		{"key", []string{"key-a  2  1,000", "key-b  6  37"}},
		{"user", []string{"ann  2  1,000", "bob  6  37"}},
		{"team", []string{"blue  6  37", "red  2  1,000"}},
		{"tag", []string{"-  5  7", "eval  3  1,030", "nightly  2  1,000"}},
		{"key,tag", []string{"key-a  eval  2  1,000", "key-b  -  5  7"}},
	} {
		out, err := runCLI(t, "usage", url, "--workspace", "acme", "--group-by", tc.group)
		if err != nil {
			t.Fatal(err)
		}
		squeezed := strings.Join(strings.Fields(strings.ReplaceAll(out, "\n", " \n ")), " ")
		for _, want := range tc.lines {
			if !strings.Contains(squeezed, strings.Join(strings.Fields(want), " ")) {
				t.Errorf("--group-by %s lacks %q:\n%s", tc.group, want, out)
			}
		}
	}
}
