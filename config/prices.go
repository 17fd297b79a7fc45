package config

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// pricesYAML is the price list kept in the repository (config/prices.yaml).
//
//go:embed prices.yaml
var pricesYAML []byte

// PriceListMaxAge is how old the price list may be before `sluice check`
// warns that its prices may be stale.
const PriceListMaxAge = 90 * 24 * time.Hour

// PriceList is the public list prices of known upstream models, with the day
// they were checked.
type PriceList struct {
	// Checked is the day every price was read off its source.
	Checked time.Time     `yaml:"-"`
	Models  []ListedModel `yaml:"models"`
}

// ListedModel is one upstream model of the price list.
type ListedModel struct {
	// Name is the model's name at its provider; Aliases are its other
	// names there (dated snapshots).
	Name     string       `yaml:"name"`
	Aliases  []string     `yaml:"aliases,omitempty"`
	Provider ProviderKind `yaml:"provider"`
	// Prices, in dollars per million tokens.
	Input       Dollars `yaml:"input"`
	CachedInput Dollars `yaml:"cached_input"`
	CacheWrite  Dollars `yaml:"cache_write"`
	Output      Dollars `yaml:"output"`
	// MaxOutputTokens and ContextWindow are the model's limits.
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	ContextWindow   int64 `yaml:"context_window"`
	// Source is the page the row was read from.
	Source string `yaml:"source"`
}

// Prices returns the listed prices as a config file would write them.
func (m ListedModel) Prices() *Prices {
	cached, write := m.CachedInput, m.CacheWrite
	return &Prices{Input: m.Input, CachedInput: &cached, CacheWrite: &write, Output: m.Output}
}

// Lookup returns the listed model that provider kind serves as upstream.
func (l *PriceList) Lookup(kind ProviderKind, upstream string) (ListedModel, bool) {
	for _, m := range l.Models {
		if m.Provider == kind && (m.Name == upstream || slices.Contains(m.Aliases, upstream)) {
			return m, true
		}
	}
	return ListedModel{}, false
}

// Age is how long ago the list was checked, at now.
func (l *PriceList) Age(now time.Time) time.Duration { return now.Sub(l.Checked) }

// KnownPrices returns the price list kept in the repository. It is parsed
// once; the caller must not change it.
func KnownPrices() *PriceList {
	l, err := knownPrices()
	if err != nil {
		// The file is embedded and its test parses it: an error here is
		// a broken build, not bad input.
		panic(err)
	}
	return l
}

var knownPrices = sync.OnceValues(func() (*PriceList, error) { return parsePriceList(pricesYAML) })

// parsePriceList reads a price list strictly: unknown fields, a missing
// date, source or limit, or a model listed twice are errors.
func parsePriceList(data []byte) (*PriceList, error) {
	var raw struct {
		Checked string        `yaml:"checked"`
		Models  []ListedModel `yaml:"models"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("config: price list: %w", err)
	}
	checked, err := time.Parse(time.DateOnly, raw.Checked)
	if err != nil {
		return nil, fmt.Errorf("config: price list: checked: want a date (2006-01-02): %w", err)
	}
	seen := map[string]bool{}
	for i, m := range raw.Models {
		at := fmt.Sprintf("config: price list: models[%d] (%s)", i, m.Name)
		switch {
		case m.Name == "":
			return nil, fmt.Errorf("%s: name is required", at)
		case m.Provider != KindOpenAI && m.Provider != KindAnthropic:
			return nil, fmt.Errorf("%s: provider must be openai or anthropic, got %q", at, m.Provider)
		case m.Input <= 0 || m.Output <= 0 || m.CachedInput <= 0 || m.CacheWrite <= 0:
			return nil, fmt.Errorf("%s: input, cached_input, cache_write and output must all be positive", at)
		case m.MaxOutputTokens <= 0 || m.ContextWindow < m.MaxOutputTokens:
			return nil, fmt.Errorf("%s: max_output_tokens must be positive and at most context_window", at)
		case m.Source == "":
			return nil, fmt.Errorf("%s: source is required", at)
		}
		for _, n := range append([]string{m.Name}, m.Aliases...) {
			k := string(m.Provider) + "/" + n
			if seen[k] {
				return nil, fmt.Errorf("%s: %s is listed twice", at, n)
			}
			seen[k] = true
		}
	}
	return &PriceList{Checked: checked, Models: raw.Models}, nil
}

// priceFromList gives m, served by provider kind, the listed price and
// limits of its upstream model when it has no price of its own, and
// reports whether it did. A price or limit in the config always wins.
func priceFromList(m *Model, kind ProviderKind, list *PriceList) bool {
	if m.Price != nil {
		return false
	}
	listed, ok := list.Lookup(kind, m.UpstreamName)
	if !ok {
		return false
	}
	m.Price = listed.Prices()
	if m.MaxOutputTokens == 0 {
		m.MaxOutputTokens = listed.MaxOutputTokens
	}
	if m.ContextWindow == 0 {
		m.ContextWindow = listed.ContextWindow
	}
	m.listed = &listed
	return true
}

// PriceListed returns the listed model whose price m took, or nil when
// its price (or its lack of one) is the config file's.
func (m *Model) PriceListed() *ListedModel { return m.listed }
