package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestLoad_TenantModels checks that full.yaml's tenant model is read as
// written.
func TestLoad_TenantModels(t *testing.T) {
	c, err := Load("testdata/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := c.TenantModel("cheap")
	want := &TenantModel{Name: "cheap", Default: "gpt-4o-mini", Routes: []TenantRoute{
		{Org: "acme", Model: "llama"},
		{Org: "acme", Workspace: "research", Model: "claude-sonnet"},
		{Tier: "new", Model: "mini"},
	}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("TenantModel(cheap) = %+v, %v\nwant %+v", got, ok, want)
	}
	if _, ok := c.TenantModel("gpt-4o-mini"); ok {
		t.Error("TenantModel(gpt-4o-mini): a served model is no tenant model")
	}
}

// TestConfig_CheckKey checks what a new key may name: configured tiers,
// and models by name, alias or tenant model name.
func TestConfig_CheckKey(t *testing.T) {
	c, err := Load("testdata/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	bare, err := Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cfg     *Config
		tier    string
		models  []string
		wantErr error
		wantMsg string
	}{
		{name: "nothing", cfg: c},
		{name: "tier", cfg: c, tier: "standard"},
		{name: "model, alias, tenant model", cfg: c, models: []string{"gpt-4o-mini", "sonnet", "cheap"}},
		{name: "tier typo", cfg: c, tier: "standrad", wantErr: ErrUnknownTier,
			wantMsg: `unknown tier "standrad" (configured: new, standard)`},
		{name: "no tiers configured", cfg: bare, tier: "pro", wantErr: ErrUnknownTier,
			wantMsg: `unknown tier "pro": the configuration has no tiers`},
		{name: "model typo", cfg: c, models: []string{"mini", "gpt-4o-mnii"}, wantErr: ErrUnknownModel,
			wantMsg: `unknown model "gpt-4o-mnii" (known: gpt-4o-mini, mini, claude-sonnet, sonnet, smart, llama, cheap)`},
		{name: "empty model", cfg: bare, models: []string{""}, wantErr: ErrUnknownModel, wantMsg: `unknown model ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.CheckKey(tc.tier, tc.models)
			if !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Fatalf("CheckKey(%q, %q) = %v, want %v", tc.tier, tc.models, err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("CheckKey(%q, %q) = %q, want it to contain %q", tc.tier, tc.models, err, tc.wantMsg)
			}
		})
	}
}
