package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
)

const keysTestConfig = `
tiers:
  - {name: pro, percent: 200}
tenant_models:
  - name: cheap
    routes: [{org: acme, model: mock-large}]
`

// keysTestSides writes keysTestConfig to a config file over a fresh data
// directory, and starts the admin API of a server running on it over a
// catalog of its own (the remote side), its token in SLUICE_ADMIN_TOKEN.
func keysTestSides(t *testing.T) (cfgPath string, cfg *config.Config, remoteCat *catalog.Catalog, srv *httptest.Server) {
	t.Helper()
	dir := t.TempDir()
	cfgPath = filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(keysTestConfig+"data_dir: "+filepath.Join(dir, "data")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	remoteCat, err = catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remoteCat.Close() })
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Options{Catalog: remoteCat, Limiter: l, AdminToken: "keys-test-token", CheckKey: checkKeyLive(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv("SLUICE_ADMIN_TOKEN", "keys-test-token")
	return cfgPath, cfg, remoteCat, srv
}

// TestKeysCreate_RefusesUnknownTierOrModel checks that "sluice keys
// create" refuses a tier or model the configuration does not know, on the
// data directory and through a running server's admin API, and creates
// the keys that name known ones.
func TestKeysCreate_RefusesUnknownTierOrModel(t *testing.T) {
	cfgPath, cfg, remoteCat, srv := keysTestSides(t)

	for _, tc := range []struct {
		name  string
		flags []string
		want  string // part of the error; empty for a key created
	}{
		{"no tier", []string{"--user", "a"}, ""},
		{"known tier, model and tenant model", []string{"--user", "b", "--tier", "pro", "--models", "mock-small,cheap"}, ""},
		{"tier typo", []string{"--user", "c", "--tier", "prO"}, `unknown tier "prO" (configured: pro)`},
		{"model typo", []string{"--user", "d", "--models", "mock-small,mock-lrage"}, `unknown model "mock-lrage" (known: mock-small, mock-large, cheap)`},
	} {
		for _, where := range []string{"local", "remote"} {
			t.Run(tc.name+"/"+where, func(t *testing.T) {
				args := append([]string{"create", "--config", cfgPath, "--workspace", "w"}, tc.flags...)
				if where == "remote" {
					args = append(args, "--admin-url", srv.URL)
				}
				err := keys(args)
				if tc.want == "" {
					if err != nil {
						t.Fatalf("keys %s: %v", strings.Join(args, " "), err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("keys %s = %v, want an error containing %q", strings.Join(args, " "), err, tc.want)
				}
			})
		}
	}
	// Only the two good keys were made, on each side.
	localCat, err := openCatalog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer localCat.Close()
	for name, cat := range map[string]*catalog.Catalog{"local": localCat, "remote": remoteCat} {
		list, err := cat.ListKeys(context.Background(), "w")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 {
			t.Errorf("%s catalog holds %d keys, want 2", name, len(list))
		}
	}
}

// TestPrintKeys_ShowsNameTierAndModels checks the columns of "sluice keys
// list".
func TestPrintKeys_ShowsNameTierAndModels(t *testing.T) {
	var out strings.Builder
	printKeys(&out, []catalog.Key{
		{ID: "aaaaaaaaaaaa", Name: "laptop", Org: "default", Workspace: "w", User: "u", Tier: "pro", AllowedModels: []string{"mock-small", "cheap"}},
		{ID: "bbbbbbbbbbbb", Org: "default", Workspace: "w", User: "v"},
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out.String())
	}
	if got := strings.Fields(lines[0]); !slices.Equal(got[:7], []string{"ID", "NAME", "ORG", "WORKSPACE", "USER", "TIER", "MODELS"}) {
		t.Errorf("header %q", lines[0])
	}
	if got := strings.Fields(lines[1]); !slices.Equal(got[:7], []string{"aaaaaaaaaaaa", "laptop", "default", "w", "u", "pro", "mock-small,cheap"}) {
		t.Errorf("first key %q", lines[1])
	}
	if got := strings.Fields(lines[2]); !slices.Equal(got[:7], []string{"bbbbbbbbbbbb", "-", "default", "w", "v", "-", "-"}) {
		t.Errorf("second key %q", lines[2])
	}
}

// TestKeysCreate_WithLimitsThroughTheAdminAPI checks that "sluice keys
// create --admin-url" sends the key's own limits, which the server makes
// with the key, and that without --admin-url they are refused.
func TestKeysCreate_WithLimitsThroughTheAdminAPI(t *testing.T) {
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Options{Catalog: cat, Limiter: l, AdminToken: "keys-test-token"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv("SLUICE_ADMIN_TOKEN", "keys-test-token")
	err = keys([]string{"create", "--admin-url", srv.URL, "--workspace", "w", "--user", "u",
		"--rpm", "30", "--max-in-flight", "2", "--budget-dollars", "12.50", "--budget-period", "week"})
	if err != nil {
		t.Fatal(err)
	}
	overrides, err := cat.ListOverrides(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, o := range overrides {
		got[o.Rule] = *o.Limit
	}
	if len(got) != 3 || got[admin.KeyRuleRequestsPerMinute] != 30 || got[admin.KeyRuleInFlight] != 2 || got["key_cost_per_week"] != 12_500_000 {
		t.Fatalf("overrides = %v", got)
	}
	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"create", "--workspace", "w", "--user", "v", "--rpm", "5"}, "need --admin-url"},
		{[]string{"create", "--admin-url", srv.URL, "--workspace", "w", "--user", "v", "--rpm", "lots"}, "whole number"},
		{[]string{"create", "--admin-url", srv.URL, "--workspace", "w", "--user", "v", "--budget-dollars", "1.0000001"}, "6 decimal places"},
	} {
		if err := keys(bad.args); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("keys %v = %v, want an error saying %q", bad.args, err, bad.says)
		}
	}
}

// keys create says, before the secret on its last line, which rules in
// force apply to the new key beside its own limits: through the admin API
// and on the data directory.
func TestKeysCreate_SaysWhichRulesAlsoApply(t *testing.T) {
	srv, _, _ := adminServer(t)
	cfgPath, _, _, _ := keysTestSides(t)
	for name, args := range map[string][]string{
		"admin API":      {"create", "--admin-url", srv.URL, "--workspace", "w", "--user", "u", "--rpm", "60", "--budget-dollars", "25"},
		"data directory": {"create", "--config", cfgPath, "--workspace", "w", "--user", "u"},
	} {
		t.Setenv("SLUICE_ADMIN_TOKEN", "cli-test-token")
		var out strings.Builder
		if err := keysTo(&out, args); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		squeezed := strings.Join(strings.Fields(out.String()), " ")
		for _, want := range []string{
			"Rules in force that also apply to its calls",
			"rate_per_minute rate workspace+user requests 1m0s 20 default (SLUICE_RATE_PER_MINUTE=0 turns it off)",
			"daily_token_budget budget workspace tokens day 2,000,000 default (SLUICE_DAILY_TOKEN_BUDGET=0 turns it off)",
		} {
			if !strings.Contains(squeezed, want) {
				t.Errorf("%s: keys create lacks %q:\n%s", name, want, out.String())
			}
		}
		if name == "admin API" && !strings.Contains(out.String(), "The key's own limits: key_requests_per_minute 60, key_cost_per_month $25") {
			t.Errorf("%s: keys create does not list the key's own limits:\n%s", name, out.String())
		}
		if !strings.HasPrefix(lines[len(lines)-1], "sk-") || !strings.HasPrefix(lines[len(lines)-2], "created key") {
			t.Errorf("%s: the secret is not alone on the last line:\n%s", name, out.String())
		}
	}
}
