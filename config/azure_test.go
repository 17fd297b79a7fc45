package config

import (
	"strings"
	"testing"
)

func TestParse_AzureProvider(t *testing.T) {
	c, err := Parse([]byte(`
providers:
  - {name: az, kind: azure, base_url: "https://acme.openai.azure.com", api_version: "2024-10-21", output_cap_field: max_tokens}
  - {name: az1, kind: azure, base_url: "https://acme.openai.azure.com/openai/v1/"}
models:
  - {name: gpt, provider: az, upstream_name: gpt-4o-prod, max_output_tokens: 4096}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Providers[0]; p.APIKeyEnv != DefaultAzureKeyEnv || p.APIVersion != "2024-10-21" {
		t.Fatalf("provider %+v", p)
	}
	for yaml, want := range map[string]string{
		"providers:\n  - {name: az, kind: azure}\n":                                                                      "providers[0].base_url: is required for kind azure",
		"providers:\n  - {name: az, kind: azure, base_url: \"https://acme.openai.azure.com\"}\n":                         "the base URL ends in /openai/v1",
		"providers:\n  - {name: o, kind: openai, api_version: \"2024-10-21\"}\n":                                         "providers[0].api_version: is for azure providers",
		"providers:\n  - {name: az, kind: azure, base_url: \"https://a.openai.azure.com/openai/v1\", organization: x}\n": "organization and project are OpenAI headers",
	} {
		if _, err := Parse([]byte(yaml), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", yaml, err, want)
		}
	}
}
