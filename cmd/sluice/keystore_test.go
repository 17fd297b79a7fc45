package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/store/memstore"
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

// TestKeyStore_AuthenticateCached checks that a key the catalog's cache
// holds is answered without the database as Authenticate answers it
// (promoted tier included), and a refused one as gateway.ErrBadKey.
func TestKeyStore_AuthenticateCached(t *testing.T) {
	created := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	now := created
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{Now: func() time.Time { return now }, CacheTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	secret, _, err := cat.CreateKey(ctx, catalog.Key{Workspace: "w", User: "u", Tier: "trial", ExpiresAt: created.Add(30 * time.Minute)}, "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
tiers:
  - {name: trial, percent: 10, promote: {after: 24h, to: new}}
  - {name: new, percent: 100}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	k := keyStore{cat: cat, config: func() *config.Config { return cfg }, now: func() time.Time { return created.Add(25 * time.Hour) }}
	if _, ok, err := k.AuthenticateCached(secret); ok || err != nil {
		t.Fatalf("before any lookup: ok %v, err %v; want not answered", ok, err)
	}
	want, err := k.Authenticate(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Close(); err != nil {
		t.Fatal(err)
	}
	got, ok, err := k.AuthenticateCached(secret)
	if !ok || err != nil || got.KeyID != want.KeyID || got.Tier != "new" || got.Workspace != "w" {
		t.Fatalf("cached: %+v, ok %v, err %v; want %+v", got, ok, err, want)
	}
	if _, ok, err := k.AuthenticateCached("sk-sluice-malformed"); !ok || !errors.Is(err, gateway.ErrBadKey) {
		t.Fatalf("malformed: ok %v, err %v; want answered ErrBadKey", ok, err)
	}
	now = created.Add(30 * time.Minute) // the key expires, within the cache's TTL
	if _, ok, err := k.AuthenticateCached(secret); !ok || !errors.Is(err, gateway.ErrBadKey) {
		t.Fatalf("expired: ok %v, err %v; want answered ErrBadKey", ok, err)
	}
}

// TestCheck_PrintsTiersAndPreAuth runs sluice check on the full example
// config: it validates it and says what tiers and the pre-auth limit do.
func TestCheck_PrintsTiersAndPreAuth(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	cmd := exec.Command(bin, "check", "--config", "../../config/testdata/full.yaml")
	cmd.Env = append(os.Environ(), "SLUICE_ENV=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		"config is valid",
		"tier new: 10% of each limit, promoted to standard once a key is 168h0m0s old or has spent $20.00",
		"tier standard: 100% of each limit\n",
		"tenant model cheap: org acme, workspace research -> claude-sonnet; org acme -> llama; tier new -> mini; anyone else -> gpt-4o-mini\n",
		"before authentication: 6000 requests per minute per client address, per replica",
	} {
		if !strings.Contains(strings.ToLower(string(out)), strings.ToLower(want)) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

// TestKeyStore_PromotesBySettledUsage runs a gateway over the catalog with
// a tier promoted by settled tokens: a trial key gets a tenth of the
// budget until the ledger holds its 200 tokens, then, once the totals are
// read again, the standard tier's whole budget.
func TestKeyStore_PromotesBySettledUsage(t *testing.T) {
	cfg, err := config.Parse([]byte(`
providers:
  - {name: mock, kind: mock}
models:
  - {name: mock-small, provider: mock, max_output_tokens: 100}
tiers:
  - {name: trial, percent: 10, promote: {tokens: 200, to: standard}}
  - {name: standard, percent: 100}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	secret, key, err := cat.CreateKey(ctx, catalog.Key{Workspace: "w", User: "u", Tier: "trial"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	budget := sluice.Rule{Name: "key_tokens", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 10_000, Period: sluice.PeriodDay}
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: []sluice.Rule{budget}, Tiers: cfg.SluiceTiers()})
	if err != nil {
		t.Fatal(err)
	}
	providers, err := providersOf(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	settled := &settledByKey{}
	keys := keyStore{cat: cat, config: func() *config.Config { return cfg }, now: time.Now, settled: settled}
	models, err := modelsOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Limiter: l, Keys: keys, Usage: ledger{cat: cat}, Models: models, Providers: providers})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server()
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	call := func() http.Header {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/chat/completions",
			strings.NewReader(`{"model":"mock-small","max_tokens":60,"messages":[{"role":"user","content":"[mock tokens=50]"}]}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("call: %d %s", resp.StatusCode, b)
		}
		return resp.Header
	}
	for i := range 4 { // 50 output tokens each, and the prompt's
		if h := call(); h.Get("X-RateLimit-Limit") != "1000" {
			t.Fatalf("call %d of a trial key: X-RateLimit-Limit %q, want a tenth of 10000", i, h.Get("X-RateLimit-Limit"))
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for settled.of(key.ID).Tokens < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("the ledger holds %+v for the key, want 200 tokens or more", settled.of(key.ID))
		}
		time.Sleep(10 * time.Millisecond)
		if err := cat.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := settled.refresh(ctx, cat); err != nil {
			t.Fatal(err)
		}
	}
	if h := call(); h.Get("X-RateLimit-Limit") != "10000" {
		t.Errorf("after 200 settled tokens: X-RateLimit-Limit %q, want the standard tier's 10000", h.Get("X-RateLimit-Limit"))
	}
}
