package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
)

// TestKeyStore_PromotesByKeyAge checks that the gateway sees a key's tier
// after the configuration's promotions, by the key's age.
func TestKeyStore_PromotesByKeyAge(t *testing.T) {
	created := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{Now: func() time.Time { return created }})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	ctx := context.Background()
	secret, _, err := cat.CreateKey(ctx, catalog.Key{Workspace: "w", User: "u", Tier: "trial"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := cat.CreateKey(ctx, catalog.Key{Workspace: "w", User: "v"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
tiers:
  - {name: trial, percent: 10, promote: {after: 24h, to: new}}
  - {name: new, percent: 50, promote: {after: 168h, to: standard}}
  - {name: standard, percent: 100}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		age  time.Duration
		want string
	}{{time.Hour, "trial"}, {25 * time.Hour, "new"}, {169 * time.Hour, "standard"}} {
		k := keyStore{cat: cat, config: func() *config.Config { return cfg }, now: func() time.Time { return created.Add(tc.age) }}
		p, err := k.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if p.Tier != tc.want {
			t.Errorf("key aged %v: tier %q, want %q", tc.age, p.Tier, tc.want)
		}
		// A key without a tier is never promoted into one.
		if p, err := k.Authenticate(ctx, plain); err != nil || p.Tier != "" {
			t.Errorf("key without tier aged %v: tier %q, err %v", tc.age, p.Tier, err)
		}
	}
}

// TestCheck_PrintsTiersAndPreAuth runs sluice check on the full example
// config: it validates it and says what tiers and the pre-auth limit do.
func TestCheck_PrintsTiersAndPreAuth(t *testing.T) {
	bin := buildSluice(t)
	cmd := exec.Command(bin, "check", "--config", "../../config/testdata/full.yaml")
	cmd.Env = append(os.Environ(), "SLUICE_ENV=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		"config is valid",
		"tier new: 10% of each limit, promoted to standard once a key is 168h0m0s old",
		"tier standard: 100% of each limit\n",
		"tenant model cheap: org acme, workspace research -> claude-sonnet; org acme -> llama; tier new -> mini; anyone else -> gpt-4o-mini\n",
		"before authentication: 6000 requests per minute per client address, per replica",
	} {
		if !strings.Contains(strings.ToLower(string(out)), strings.ToLower(want)) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}
