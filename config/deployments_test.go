package config

import (
	"strings"
	"testing"
)

func TestParse_Deployments(t *testing.T) {
	c, err := Parse([]byte(`
providers:
  - {name: east, kind: azure, base_url: "https://east.openai.azure.com/openai/v1"}
  - {name: oa, kind: openai}
models:
  - name: gpt-4o
    upstream_name: gpt4o-prod
    max_output_tokens: 4096
    deployments:
      - {provider: east}
      - {provider: oa, upstream_name: gpt-4o, weight: 2}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Models[0]
	// The model's provider is its first deployment's, for its price list
	// and tokenizer.
	if m.Provider != "east" || len(m.Deployments) != 2 || m.Deployments[1] != (Deployment{Provider: "oa", UpstreamName: "gpt-4o", Weight: 2}) {
		t.Fatalf("model %+v", m)
	}
	base := "providers:\n  - {name: oa, kind: openai}\nmodels:\n  - name: m\n    max_output_tokens: 10\n    deployments:\n"
	for yaml, want := range map[string]string{
		base + "      - {provider: nope}\n":                                   `models[0].deployments[0].provider: unknown provider "nope"`,
		base + "      - {provider: oa}\n      - {provider: oa}\n":             "models[0].deployments[1]: oa/m is listed twice",
		base + "      - {provider: oa, weight: -1}\n":                         "models[0].deployments[0].weight: must not be negative",
		base + "      - {upstream_name: x}\n":                                 "models[0].deployments[0].provider: is empty",
		"providers:\n  - {name: oa, kind: openai, requests_per_minute: -1}\n": "providers[0]: requests_per_minute and tokens_per_minute must not be negative",
	} {
		if _, err := Parse([]byte(yaml), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", yaml, err, want)
		}
	}
}
