package main

import (
	"context"
	"log/slog"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestServe_WiresTenantModelsAndProviderHeaders checks that serve hands
// the gateway the configuration's tenant models and the providers'
// organization and project, and that the gateway accepts them.
func TestServe_WiresTenantModelsAndProviderHeaders(t *testing.T) {
	cfg, err := config.Parse([]byte(`
providers:
  - {name: openai, kind: openai, base_url: "http://127.0.0.1:1/v1", organization: org-op, project: proj_op}
models:
  - {name: small, provider: openai, max_output_tokens: 100, aliases: [tiny]}
  - {name: large, provider: openai, max_output_tokens: 100}
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
	if _, err := gateway.New(gateway.Options{Limiter: l, Keys: keyStore{}, Models: models, Providers: providers,
		TenantModels: tenantModelsOf(cfg)}); err != nil {
		t.Errorf("gateway.New: %v", err)
	}
}
