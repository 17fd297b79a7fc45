package main

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestServe_WiresTenantModelsAndProviderHeaders checks that serve hands
// the gateway the configuration's tenant models, the models' deployments
// and the providers' organization and project, and that the gateway
// accepts them.
func TestServe_WiresTenantModelsAndProviderHeaders(t *testing.T) {
	cfg, err := config.Parse([]byte(`
providers:
  - {name: openai, kind: openai, base_url: "http://127.0.0.1:1/v1", organization: org-op, project: proj_op}
  - {name: second, kind: openai, base_url: "http://127.0.0.1:2/v1"}
models:
  - {name: small, provider: openai, max_output_tokens: 100, aliases: [tiny]}
  - {name: large, provider: openai, max_output_tokens: 100}
  - name: multi
    max_output_tokens: 100
    deployments: [{provider: openai}, {provider: second, upstream_name: multi-2, weight: 3}]
tiers:
  - {name: free, percent: 10}
tenant_models:
  - name: cheap
    default: tiny
    routes:
      - {org: acme, workspace: research, model: large}
      - {tier: free, model: small}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	providers, err := providersOf(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if p := providers[0]; p.Organization != "org-op" || p.Project != "proj_op" {
		t.Errorf("provider = %+v, want organization org-op and project proj_op", p)
	}
	want := []gateway.TenantModel{{Name: "cheap", Default: "tiny", Routes: []gateway.TenantRoute{
		{Org: "acme", Workspace: "research", Model: "large"}, {Tier: "free", Model: "small"}}}}
	if got := tenantModelsOf(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("tenantModelsOf = %+v\nwant %+v", got, want)
	}
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	models, err := modelsOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantDeps := []gateway.Deployment{{Provider: "openai"}, {Provider: "second", UpstreamName: "multi-2", Weight: 3}}
	if got := models[2]; got.Name != "multi" || !reflect.DeepEqual(got.Deployments, wantDeps) {
		t.Errorf("model %+v, want the deployments %+v", got, wantDeps)
	}
	if _, err := gateway.New(gateway.Options{Limiter: l, Keys: keyStore{}, Models: models, Providers: providers,
		TenantModels: tenantModelsOf(cfg)}); err != nil {
		t.Errorf("gateway.New: %v", err)
	}
}

// TestServe_TokenizerOfEachModel: OpenAI models on openai and azure
// providers get their encoding by upstream name, a tokenizer set in the
// file wins, none and other providers' models get none; serve hands the
// gateway a tokenizer only where there is a context window to check.
func TestServe_TokenizerOfEachModel(t *testing.T) {
	cfg, err := config.Parse([]byte(`
providers:
  - {name: openai, kind: openai, base_url: "http://127.0.0.1:1/v1"}
  - {name: az, kind: azure, base_url: "http://127.0.0.1:1", api_version: "2024-10-21"}
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:1/v1"}
  - {name: anthropic, kind: anthropic, base_url: "http://127.0.0.1:1"}
models:
  - {name: mini, provider: openai, upstream_name: gpt-4o-mini, max_output_tokens: 100, context_window: 128000}
  - {name: old, provider: az, upstream_name: gpt-4, max_output_tokens: 100, context_window: 8192}
  - {name: off, provider: openai, upstream_name: gpt-4o, max_output_tokens: 100, context_window: 128000, tokenizer: none}
  - {name: oss, provider: local, upstream_name: gpt-4o, max_output_tokens: 100, context_window: 128000}
  - {name: set, provider: local, max_output_tokens: 100, context_window: 32000, tokenizer: cl100k_base}
  - {name: claude, provider: anthropic, upstream_name: claude-sonnet-4-5, max_output_tokens: 100, context_window: 200000}
  - {name: nowindow, provider: openai, upstream_name: gpt-4o, max_output_tokens: 100}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"mini": "o200k_base", "old": "cl100k_base", "off": "", "oss": "", "set": "cl100k_base", "claude": "", "nowindow": "o200k_base"}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if got := tokenizerOf(cfg, m); got != want[m.Name] {
			t.Errorf("tokenizerOf(%s) = %q, want %q", m.Name, got, want[m.Name])
		}
	}
	models, err := modelsOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if has := m.Tokenizer != nil; has != (want[m.Name] != "" && m.ContextWindow > 0) {
			t.Errorf("model %s: tokenizer set %v", m.Name, has)
		}
	}
}

// TestServe_WiresLeaseTimeout: serve's Limiter, over its store wrapped for
// metrics as serve wraps it, admits a call due lease_timeout ahead rather
// than at request_timeout plus expiry_slack, and renews it.
func TestServe_WiresLeaseTimeout(t *testing.T) {
	cfg, err := config.Parse([]byte("lease_timeout: 45s\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	store := admin.NewMetrics(admin.MetricsOptions{}).Store(memstore.New(memstore.Options{}))
	opts := limiterOptions(cfg, store, nil, nil)
	clock := storetest.NewClock(storetest.Start)
	opts.Clock = clock
	opts.Rules = append(opts.Rules, sluice.Rule{Name: "busy", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1})
	l, err := sluice.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: "k", Workspace: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := storetest.Start.Add(45 * time.Second); !r.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", r.Deadline(), want)
	}
	clock.Advance(15 * time.Second)
	if err := l.RenewLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if want := storetest.Start.Add(time.Minute); !r.Deadline().Equal(want) {
		t.Fatalf("renewed deadline %v, want %v", r.Deadline(), want)
	}
}
