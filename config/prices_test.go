package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestPriceList_KeptFileParses checks the list in the repository: dated,
// every row sourced from its provider's own pages and complete.
func TestPriceList_KeptFileParses(t *testing.T) {
	l, err := parsePriceList(pricesYAML)
	if err != nil {
		t.Fatal(err)
	}
	if l.Checked.IsZero() || l.Checked.After(time.Now()) {
		t.Fatalf("checked = %v, want a day in the past", l.Checked)
	}
	kinds := map[ProviderKind]int{}
	for _, m := range l.Models {
		kinds[m.Provider]++
		want := map[ProviderKind]string{KindOpenAI: "https://developers.openai.com/", KindAnthropic: "https://platform.claude.com/"}[m.Provider]
		if !strings.HasPrefix(m.Source, want) {
			t.Errorf("%s: source %q is not the provider's own page (%s...)", m.Name, m.Source, want)
		}
		if m.CachedInput > m.Input {
			t.Errorf("%s: cached input %d above input %d", m.Name, m.CachedInput, m.Input)
		}
	}
	if kinds[KindOpenAI] == 0 || kinds[KindAnthropic] == 0 {
		t.Fatalf("the list has %v models by provider, want some of each", kinds)
	}
}

const pricedConfig = `
providers:
  - {name: oai, kind: openai}
  - {name: ant, kind: anthropic}
  - {name: local, kind: openai-compatible, base_url: "http://127.0.0.1:1"}
models:
  - {name: mini, provider: oai, upstream_name: gpt-5-mini}
  - {name: haiku, provider: ant, upstream_name: claude-haiku-4-5-20251001, max_output_tokens: 1000}
  - {name: own-price, provider: oai, upstream_name: gpt-5-mini, price: {input: 1, output: 2}, max_output_tokens: 100}
  - {name: gpt-5-mini, provider: local, max_output_tokens: 100}
  - {name: unknown, provider: oai, max_output_tokens: 100}
`

// TestPriceList_UsedWhenTheConfigGivesNone checks that a model naming a
// listed upstream model on a provider of its kind takes the list's price
// and limits when the file gives none, and that the file always wins.
func TestPriceList_UsedWhenTheConfigGivesNone(t *testing.T) {
	c, err := Parse([]byte(pricedConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := c.Model("mini")
	if got, want := c.Price("mini"), (sluice.Price{Input: 250_000, CachedInput: 25_000, CacheWrite: 250_000, Output: 2_000_000}); got != want {
		t.Errorf("mini price = %+v, want %+v", got, want)
	}
	if m.MaxOutputTokens != 128_000 || m.ContextWindow != 400_000 || m.PriceListed() == nil || m.PriceListed().Name != "gpt-5-mini" {
		t.Errorf("mini = max output %d, context %d, listed %v", m.MaxOutputTokens, m.ContextWindow, m.PriceListed())
	}
	// An alias (a dated snapshot) is found; the file's max_output_tokens stays.
	h, _ := c.Model("haiku")
	if got := c.Price("haiku"); got.Input != 1_000_000 || got.CacheWrite != 1_250_000 || got.CachedInput != 100_000 || got.Output != 5_000_000 {
		t.Errorf("haiku price = %+v", got)
	}
	if h.MaxOutputTokens != 1000 || h.ContextWindow != 200_000 {
		t.Errorf("haiku limits = %d, %d; want the file's 1000 and the list's 200000", h.MaxOutputTokens, h.ContextWindow)
	}
	// The file's price wins; an openai-compatible server's model of the
	// same name is not OpenAI's; an unlisted model stays unpriced.
	if got := c.Price("own-price"); got.Input != 1_000_000 || got.Output != 2_000_000 {
		t.Errorf("own-price = %+v, want the file's", got)
	}
	for _, name := range []string{"own-price", "gpt-5-mini", "unknown"} {
		if m, _ := c.Model(name); m.PriceListed() != nil {
			t.Errorf("%s took a listed price", name)
		}
	}
	if got := c.Price("gpt-5-mini"); got != (sluice.Price{}) {
		t.Errorf("the openai-compatible gpt-5-mini = %+v, want unpriced", got)
	}
	if w := strings.Join(c.Warnings(), "\n"); !strings.Contains(w, `model "unknown" has no price`) || strings.Contains(w, `model "mini" has no price`) {
		t.Errorf("warnings:\n%s", w)
	}
}

func TestPriceList_RefusesBadLists(t *testing.T) {
	row := "  - {name: m, provider: openai, input: 1, cached_input: 0.5, cache_write: 1, output: 2, max_output_tokens: 10, context_window: 100, source: https://x%s}\n"
	for _, tc := range []struct {
		name, yaml, says string
	}{
		{"no date", "models: []\n", "checked"},
		{"unknown field", "checked: 2026-01-01\nprice: 3\n", "price"},
		{"unknown provider", "checked: 2026-01-01\nmodels:\n  - {name: m, provider: mock, input: 1, cached_input: 1, cache_write: 1, output: 1, max_output_tokens: 1, context_window: 1, source: s}\n", "provider"},
		{"no source", "checked: 2026-01-01\nmodels:\n  - {name: m, provider: openai, input: 1, cached_input: 1, cache_write: 1, output: 1, max_output_tokens: 1, context_window: 1}\n", "source"},
		{"missing price", "checked: 2026-01-01\nmodels:\n  - {name: m, provider: openai, input: 1, output: 1, max_output_tokens: 1, context_window: 1, source: s}\n", "positive"},
		{"twice", "checked: 2026-01-01\nmodels:\n" + strings.Replace(row, "%s", "", 1) + strings.Replace(row, "%s", "", 1), "twice"},
		{"output over context", "checked: 2026-01-01\nmodels:\n  - {name: m, provider: openai, input: 1, cached_input: 1, cache_write: 1, output: 1, max_output_tokens: 10, context_window: 5, source: s}\n", "context_window"},
	} {
		if _, err := parsePriceList([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: err = %v, want one saying %q", tc.name, err, tc.says)
		}
	}
}
