package config

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// envOf is an environment for tests: nothing but vars is set.
func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestDefault_ValidatesCleanly(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("Default().Warnings() = %q, want none", w)
	}
	if c.Listen != "127.0.0.1:8080" || c.AdminListen != "127.0.0.1:8081" || c.DataDir != "./.sluice" ||
		c.Store != "" || c.Database != "" || c.MaxBodyBytes != 8<<20 || c.RequestTimeout != 10*time.Minute ||
		c.Env != "development" || *c.UpstreamRetries != 2 || len(c.TrustedProxies) != 0 {
		t.Errorf("Default() server fields = %+v", c)
	}
	if len(c.Providers) != 1 || c.Providers[0] != (Provider{Name: "mock", Kind: KindMock}) {
		t.Errorf("Default().Providers = %+v", c.Providers)
	}
	if len(c.Rules) != 0 || len(c.Tiers) != 0 {
		t.Errorf("Default() has rules %v or tiers %v", c.Rules, c.Tiers)
	}
	models := map[string]struct {
		price                   sluice.Price
		maxOutput, contextWidth int64
	}{
		"mock-small": {sluice.Price{Input: 150_000, CachedInput: 150_000, CacheWrite: 150_000, Output: 600_000}, 4096, 128_000},
		"mock-large": {sluice.Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_000_000, Output: 15_000_000}, 8192, 200_000},
	}
	if len(c.Models) != len(models) {
		t.Fatalf("Default() has %d models, want %d", len(c.Models), len(models))
	}
	for name, want := range models {
		m, ok := c.Model(name)
		if !ok {
			t.Fatalf("Default() has no model %q", name)
		}
		if m.Provider != "mock" || m.UpstreamName != name || m.MaxOutputTokens != want.maxOutput || m.ContextWindow != want.contextWidth {
			t.Errorf("model %q = %+v", name, m)
		}
		if got := c.Price(name); got != want.price {
			t.Errorf("Price(%q) = %+v, want %+v", name, got, want.price)
		}
	}
	if got := c.EffectiveRules(); !reflect.DeepEqual(got, withSource(DefaultRules(), SourceDefault)) {
		t.Errorf("Default() effective rules = %+v", got)
	}
}

func TestLoad_EmptyPathIsDefault(t *testing.T) {
	c, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("Load(\"\", nil) = %+v, want Default()", c)
	}
	c, err = Load("", envOf(map[string]string{VarListen: "127.0.0.1:7000", VarMaxInFlight: "4"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7000" || c.Knobs[VarMaxInFlight] != 4 {
		t.Errorf("Load(\"\", env) did not apply env: listen %q knobs %v", c.Listen, c.Knobs)
	}
}

func TestLoad_FullExample(t *testing.T) {
	c, err := Load("testdata/full.yaml", envOf(map[string]string{"OPENAI_API_KEY": "sk-test"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "0.0.0.0:9080" || c.AdminListen != "127.0.0.1:9081" || c.DataDir != "/var/lib/sluice" ||
		c.StoreURL() != "redis://cache:6379/0" || c.DatabaseURL() != "postgres://sluice@db/sluice" ||
		c.MaxBodyBytes != 1<<20 || c.RequestTimeout != 150*time.Second || c.ExpirySlack != 45*time.Second || c.LeaseTimeout != 90*time.Second || c.MaxWait != time.Minute || c.Tiers[0].MaxWait != 5*time.Second || c.Tiers[0].Class != "batch" || !c.IsProduction() || *c.UpstreamRetries != 0 {
		t.Errorf("server fields = %+v", c)
	}
	if got, want := c.HeadroomWorkspaces(), []WorkspaceRef{{"default", "research"}, {"partner-co", "support"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("HeadroomWorkspaces() = %v, want %v", got, want)
	}
	wantPrefixes := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("fd00::/8")}
	if got := c.TrustedPrefixes(); !reflect.DeepEqual(got, wantPrefixes) {
		t.Errorf("TrustedPrefixes() = %v, want %v", got, wantPrefixes)
	}
	wantProviders := []Provider{
		{Name: "openai", Kind: KindOpenAI, BaseURL: DefaultOpenAIBaseURL, APIKeyEnv: "OPENAI_API_KEY", Organization: "org-acme", Project: "proj_gateway"},
		{Name: "anthropic", Kind: KindAnthropic, BaseURL: DefaultAnthropicBaseURL, APIKeyEnv: "CLAUDE_KEY", Pace: true},
		{Name: "local", Kind: KindOpenAICompatible, BaseURL: "http://127.0.0.1:8000/v1"},
		{Name: "mock", Kind: KindMock},
	}
	if !reflect.DeepEqual(c.Providers, wantProviders) {
		t.Errorf("Providers = %+v\nwant %+v", c.Providers, wantProviders)
	}
	sonnet, ok := c.Model("smart")
	if !ok || sonnet.Name != "claude-sonnet" || sonnet.UpstreamName != "claude-sonnet-4-5" ||
		!slices.Equal(sonnet.Fallbacks, []string{"mini", "llama"}) {
		t.Errorf("Model(smart) = %+v, %v", sonnet, ok)
	}
	if got, want := c.Price("sonnet"), (sluice.Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, Output: 15_000_000}); got != want {
		t.Errorf("Price(sonnet) = %+v, want %+v", got, want)
	}
	if got, want := c.Price("mini"), (sluice.Price{Input: 150_000, CachedInput: 75_000, CacheWrite: 150_000, Output: 600_000}); got != want {
		t.Errorf("Price(mini) = %+v, want %+v", got, want)
	}
	if got := c.Price("llama"); got != (sluice.Price{}) {
		t.Errorf("Price(llama) = %+v, want zero (no price)", got)
	}
	wantCost := sluice.Rule{
		Name: "sonnet_monthly_cost", Kind: sluice.KindBudget, Subject: "org", Metric: sluice.MetricCost,
		Limit: 500_000_000, Period: sluice.PeriodMonth, TimeZone: "Europe/Paris", SoftLimit: 400_000_000,
		WarnAt: []float64{0.5, 0.9}, Reserve: sluice.ReserveEstimate, OnExpiry: sluice.ExpiryRelease,
		OnStoreError: sluice.StoreErrorOpen, Fit: "clamp", MinOutputTokens: 256,
		Match:  sluice.Match{Models: []string{"claude-sonnet"}, Tiers: []string{"standard"}, Routes: []string{"chat"}},
		Source: SourceConfig,
	}
	rules := c.EffectiveRules()
	if got := ruleNamed(rules, "sonnet_monthly_cost"); !reflect.DeepEqual(got, wantCost) {
		t.Errorf("sonnet_monthly_cost = %+v\nwant %+v", got, wantCost)
	}
	if got := ruleNamed(rules, "batch_tokens"); got.Mode != sluice.ModeShadow || got.Reserve != sluice.ReserveFixed || got.ReserveAmount != 8000 {
		t.Errorf("batch_tokens = %+v", got)
	}
	if got := ruleNamed(rules, "sonnet_tokens_per_minute"); got.LimitFrom != sluice.LimitFromProvider || got.Limit != 400_000 || got.Subject != "model" {
		t.Errorf("sonnet_tokens_per_minute = %+v, want its limit from the provider", got)
	}
	if got := ruleNamed(rules, "retired"); !got.Disabled {
		t.Errorf("retired = %+v, want Disabled", got)
	}
	if got := ruleNamed(rules, RuleRatePerMinute); got.Source != SourceConfig || got.Subject != "key" || got.Limit != 120 || got.Burst != 240 {
		t.Errorf("rate_per_minute = %+v, want the file's", got)
	}
	wantTiers := []sluice.Tier{{Name: "new", Percent: 10}, {Name: "standard", Percent: 100}}
	if got := c.SluiceTiers(); !reflect.DeepEqual(got, wantTiers) {
		t.Errorf("SluiceTiers() = %v", got)
	}
	if p := c.Tiers[0].Promote; p == nil || p.After != 168*time.Hour || p.Cost != 20_000_000 || p.To != "standard" {
		t.Errorf("tiers[0].promote = %+v", p)
	}
	wantWarnings := []string{
		`limit "retired" is disabled (enabled: false in the config rules): nothing is counted or refused by it`,
		`model "llama" has no price: its calls cost 0 against cost budgets`,
		`provider "anthropic": CLAUDE_KEY is not set: calls go upstream without a key unless the client brings its own`,
	}
	if got := c.Warnings(); !slices.Equal(got, wantWarnings) {
		t.Errorf("Warnings() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantWarnings, "\n"))
	}
	p, _ := c.Provider("openai")
	if got := p.APIKey(envOf(map[string]string{"OPENAI_API_KEY": "sk-test"})); got != "sk-test" {
		t.Errorf("APIKey = %q", got)
	}
}

// TestParse_Good checks what defaults and environment variables do to small
// valid files.
func TestParse_Good(t *testing.T) {
	const models = "providers: [{name: p, kind: mock}]\nmodels:\n  - {name: m, provider: p, max_output_tokens: 100"
	tests := []struct {
		name  string
		yaml  string
		env   map[string]string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "empty file serves the mock models",
			yaml: "",
			check: func(t *testing.T, c *Config) {
				if len(c.Models) != 2 || c.Models[0].Name != "mock-small" || c.Listen != DefaultListen {
					t.Errorf("config = %+v", c)
				}
				if w := c.Warnings(); len(w) != 1 || !strings.Contains(w[0], "built-in mock models") {
					t.Errorf("Warnings() = %q", w)
				}
			},
		},
		{
			name: "a rule with priority classes",
			yaml: `rules:
  - {name: model-calls, kind: concurrency, subject: global, limit: 12, default_class: standard,
     classes: [{name: interactive, weight: 3, floor: 6}, {name: standard, weight: 2, floor: 3}, {name: batch, weight: 1}]}
`,
			check: func(t *testing.T, c *Config) {
				r := c.Rules[0].SluiceRule()
				want := []sluice.Class{{Name: "interactive", Weight: 3, Floor: 6}, {Name: "standard", Weight: 2, Floor: 3}, {Name: "batch", Weight: 1}}
				if r.DefaultClass != "standard" || !slices.Equal(r.Classes, want) {
					t.Errorf("rule %+v, want the classes %+v", r, want)
				}
			},
		},
		{
			name: "comments only",
			yaml: "# nothing yet\n",
			check: func(t *testing.T, c *Config) {
				if _, ok := c.Model("mock-large"); !ok {
					t.Error("no mock-large")
				}
			},
		},
		{
			name: "only rules, on the mock models",
			yaml: "rules:\n  - {name: per_key, kind: concurrency, subject: key, limit: 2, match: {models: [mock-small]}}\n",
			check: func(t *testing.T, c *Config) {
				if got := ruleNamed(c.EffectiveRules(), "per_key"); got.Limit != 2 || got.Kind != sluice.KindConcurrency {
					t.Errorf("per_key = %+v", got)
				}
			},
		},
		{
			name: "upstream name defaults to name, prices to input",
			yaml: models + ", price: {input: 2.5, output: 10}}\n",
			check: func(t *testing.T, c *Config) {
				m, _ := c.Model("m")
				if m.UpstreamName != "m" {
					t.Errorf("upstream_name = %q", m.UpstreamName)
				}
				if got, want := c.Price("m"), (sluice.Price{Input: 2_500_000, CachedInput: 2_500_000, CacheWrite: 2_500_000, Output: 10_000_000}); got != want {
					t.Errorf("Price = %+v, want %+v", got, want)
				}
			},
		},
		{
			name: "quoted and zero prices",
			yaml: models + `, price: {input: "3", cached_input: 0, output: "0.000001"}}` + "\n",
			check: func(t *testing.T, c *Config) {
				if got, want := c.Price("m"), (sluice.Price{Input: 3_000_000, CacheWrite: 3_000_000, Output: 1}); got != want {
					t.Errorf("Price = %+v, want %+v", got, want)
				}
			},
		},
		{
			name: "zero retries stay zero, rules are enabled by default",
			yaml: models + "}\nupstream_retries: 0\nrules:\n  - {name: a, kind: concurrency, subject: key, limit: 1}\n  - {name: b, kind: concurrency, subject: key, limit: 1, enabled: false}\n",
			check: func(t *testing.T, c *Config) {
				if *c.UpstreamRetries != 0 {
					t.Errorf("upstream_retries = %d", *c.UpstreamRetries)
				}
				if !*c.Rules[0].Enabled || *c.Rules[1].Enabled {
					t.Errorf("enabled = %v, %v", *c.Rules[0].Enabled, *c.Rules[1].Enabled)
				}
				if ruleNamed(c.EffectiveRules(), "a").Disabled || !ruleNamed(c.EffectiveRules(), "b").Disabled {
					t.Error("Disabled not carried to the engine's rules")
				}
			},
		},
		{
			name: "environment overrides the file",
			yaml: models + "}\nlisten: 127.0.0.1:1\nadmin_listen: 127.0.0.1:2\ndata_dir: /a\nstore: memory://\ndatabase: sqlite:///a/db\nenv: development\n",
			env: map[string]string{
				VarListen: ":8080", VarAdminListen: "[::1]:8081", VarDataDir: "/b", VarStore: "redis-cluster://r1:7000,r2:7000",
				VarDatabase: "postgres://db/s", VarEnv: "production",
			},
			check: func(t *testing.T, c *Config) {
				if c.Listen != ":8080" || c.AdminListen != "[::1]:8081" || c.DataDir != "/b" ||
					c.Store != "redis-cluster://r1:7000,r2:7000" || c.Database != "postgres://db/s" || c.Env != "production" {
					t.Errorf("config = %+v", c)
				}
			},
		},
		{
			name: "empty variables change nothing",
			yaml: models + "}\nlisten: 127.0.0.1:1\n",
			env:  map[string]string{VarListen: "", VarRatePerMinute: ""},
			check: func(t *testing.T, c *Config) {
				if c.Listen != "127.0.0.1:1" || len(c.Knobs) != 0 {
					t.Errorf("listen %q knobs %v", c.Listen, c.Knobs)
				}
			},
		},
		{
			name: "state under data_dir by default",
			yaml: models + "}\ndata_dir: /srv/sluice\n",
			check: func(t *testing.T, c *Config) {
				if c.StoreURL() != "sqlite:///srv/sluice/counters.db" || c.DatabaseURL() != "sqlite:///srv/sluice/catalog.db" {
					t.Errorf("StoreURL %q DatabaseURL %q", c.StoreURL(), c.DatabaseURL())
				}
			},
		},
		{
			name: "fallback through an alias, fallbacks need not be symmetric",
			yaml: models + ", fallbacks: [cheap]}\n  - {name: n, provider: p, max_output_tokens: 10, aliases: [cheap], fallbacks: [m]}\n",
			check: func(t *testing.T, c *Config) {
				if m, _ := c.Model("cheap"); m.Name != "n" {
					t.Errorf("Model(cheap) = %+v", m)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), envOf(tt.env))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate after Parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestConfig_ModelLookup(t *testing.T) {
	c, err := Load("testdata/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A Config built in Go has no index: lookups scan.
	literal := &Config{Models: c.Models}
	for _, cfg := range []*Config{c, literal} {
		for name, want := range map[string]string{"gpt-4o-mini": "gpt-4o-mini", "mini": "gpt-4o-mini", "sonnet": "claude-sonnet", "llama": "llama"} {
			if m, ok := cfg.Model(name); !ok || m.Name != want {
				t.Errorf("Model(%q) = %v, %v; want %q", name, m, ok, want)
			}
		}
		if m, ok := cfg.Model("gpt-5"); ok {
			t.Errorf("Model(gpt-5) = %v", m)
		}
		if p := cfg.Price("gpt-5"); p != (sluice.Price{}) {
			t.Errorf("Price(gpt-5) = %+v", p)
		}
	}
}

// TestParse_RuleErrorIsWrapped checks that the engine's verdict on a rule
// can be reached with errors.As, with the field path in front.
func TestParse_RuleErrorIsWrapped(t *testing.T) {
	_, err := Parse([]byte("rules:\n  - {name: ok, kind: concurrency, subject: key, limit: 1}\n  - {name: r, kind: budget, subject: org, limit: 5, period: fortnight}\n"), nil)
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Rule != "r" || re.Field != "period" {
		t.Fatalf("error %v does not wrap the *sluice.RuleError of rule r", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "rules[1].period" {
		t.Errorf("FieldError = %+v", fe)
	}
	if want := `config: rules[1].period: must be day, week or month, not "fortnight"`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

// TestConfig_MarshalRoundTrip writes a parsed config back as YAML and reads
// it again: nothing is lost, prices included.
func TestConfig_MarshalRoundTrip(t *testing.T) {
	c, err := Load("testdata/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out, nil)
	if err != nil {
		t.Fatalf("Parse of the marshaled config: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip changed the config:\n%s", out)
	}
}

func ruleNamed(rules []sluice.Rule, name string) sluice.Rule {
	for _, r := range rules {
		if r.Name == name {
			return r
		}
	}
	return sluice.Rule{}
}

func withSource(rules []sluice.Rule, source string) []sluice.Rule {
	out := slices.Clone(rules)
	for i := range out {
		out[i].Source = source
	}
	return out
}

func TestPromotedTier(t *testing.T) {
	c, err := Parse([]byte(`
tiers:
  - {name: trial, percent: 10, promote: {after: 24h, to: new}}
  - {name: new, percent: 50, promote: {after: 168h, to: standard}}
  - {name: standard, percent: 100}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tier string
		age  time.Duration
		want string
	}{
		{"trial", 0, "trial"},
		{"trial", 24*time.Hour - time.Nanosecond, "trial"},
		{"trial", 24 * time.Hour, "new"},
		{"trial", 200 * time.Hour, "standard"},
		{"new", 167 * time.Hour, "new"},
		{"new", 168 * time.Hour, "standard"},
		{"standard", 10000 * time.Hour, "standard"},
		{"", 10000 * time.Hour, ""},
		{"unknown", 10000 * time.Hour, "unknown"},
	} {
		if got := c.PromotedTier(tc.tier, tc.age, Settled{}); got != tc.want {
			t.Errorf("PromotedTier(%q, %v) = %q, want %q", tc.tier, tc.age, got, tc.want)
		}
	}
}

// TestPromotedTier_BySettledUsage: a tier is left when the key is old
// enough or has settled enough tokens or spend, whichever comes first.
func TestPromotedTier_BySettledUsage(t *testing.T) {
	c, err := Parse([]byte(`
tiers:
  - {name: trial, percent: 10, promote: {after: 720h, tokens: 100000, to: new}}
  - {name: new, percent: 50, promote: {cost: 25.50, to: standard}}
  - {name: standard, percent: 100}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.PromotesByUsage() {
		t.Error("PromotesByUsage is false")
	}
	for _, tc := range []struct {
		tier string
		age  time.Duration
		used Settled
		want string
	}{
		{"trial", time.Hour, Settled{Tokens: 99_999, Cost: 1 << 40}, "trial"}, // cost is not trial's threshold
		{"trial", time.Hour, Settled{Tokens: 100_000}, "new"},
		{"trial", 720 * time.Hour, Settled{}, "new"},
		{"new", time.Hour, Settled{Cost: 25_499_999}, "new"},
		{"new", time.Hour, Settled{Cost: 25_500_000}, "standard"},
		{"trial", time.Hour, Settled{Tokens: 100_000, Cost: 25_500_000}, "standard"},
	} {
		if got := c.PromotedTier(tc.tier, tc.age, tc.used); got != tc.want {
			t.Errorf("PromotedTier(%q, %v, %+v) = %q, want %q", tc.tier, tc.age, tc.used, got, tc.want)
		}
	}
	byAge, err := Parse([]byte(`
tiers:
  - {name: trial, percent: 10, promote: {after: 24h, to: standard}}
  - {name: standard, percent: 100}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if byAge.PromotesByUsage() {
		t.Error("PromotesByUsage is true for promotions by age only")
	}
}

func TestConfig_SessionTerms(t *testing.T) {
	c, err := Parse([]byte(`
providers: [{name: mock, kind: mock}]
models:
  - {name: small, provider: mock, max_output_tokens: 100, aliases: [s]}
  - {name: large, provider: mock, max_output_tokens: 100}
tiers:
  - {name: free, percent: 50}
  - {name: pro, percent: 200, session_model: large}
sessions: {model: s, max_turns: 10, max_cost: 1.5, max_context_tokens: 8000}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sessions.MaxDuration != DefaultSessionDuration || c.Sessions.MaxOpenPerUser != DefaultSessionsPerUser {
		t.Fatalf("defaults: %+v", c.Sessions)
	}
	for _, tc := range []struct {
		tier string
		want SessionTerms
	}{
		{"", SessionTerms{Model: "small", MaxDuration: time.Hour, MaxTurns: 10, MaxCost: 1_500_000, MaxContext: 8000}},
		{"free", SessionTerms{Model: "small", MaxDuration: time.Hour, MaxTurns: 5, MaxCost: 750_000, MaxContext: 4000}},
		{"pro", SessionTerms{Model: "large", MaxDuration: time.Hour, MaxTurns: 20, MaxCost: 3_000_000, MaxContext: 16000}},
	} {
		if got := c.SessionTerms(tc.tier); got != tc.want {
			t.Errorf("tier %q: %+v, want %+v", tc.tier, got, tc.want)
		}
	}
}
