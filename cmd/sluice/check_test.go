package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// TestCheck_SaysWhichPricesCameFromTheList checks that `sluice check` names
// the models priced from the list, and warns once the list is more than
// 90 days old.
func TestCheck_SaysWhichPricesCameFromTheList(t *testing.T) {
	cfg, err := config.Parse([]byte(`
providers:
  - {name: oai, kind: openai}
models:
  - {name: mini, provider: oai, upstream_name: gpt-5-mini}
  - {name: mine, provider: oai, upstream_name: gpt-5-mini, price: {input: 1, output: 2}, max_output_tokens: 10}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := config.KnownPrices().Checked
	listed, warnings := priceListReport(cfg, checked.Add(24*time.Hour))
	if len(listed) != 1 || !strings.Contains(listed[0], "model mini from the price list (gpt-5-mini") ||
		!strings.Contains(listed[0], "$0.25 input") || !strings.Contains(listed[0], "https://developers.openai.com/") {
		t.Fatalf("listed = %q", listed)
	}
	if len(warnings) != 0 {
		t.Fatalf("a fresh list warned: %q", warnings)
	}
	_, warnings = priceListReport(cfg, checked.Add(91*24*time.Hour))
	if len(warnings) != 1 || !strings.Contains(warnings[0], "91 days ago") {
		t.Fatalf("an old list: warnings = %q", warnings)
	}
	// A config that takes no price from the list is not warned about it.
	own, err := config.Parse([]byte("providers: [{name: oai, kind: openai}]\nmodels: [{name: mine, provider: oai, price: {input: 1, output: 2}, max_output_tokens: 10}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if listed, warnings := priceListReport(own, checked.Add(365*24*time.Hour)); len(listed)+len(warnings) != 0 {
		t.Fatalf("own prices: %q, %q", listed, warnings)
	}
}
