// Package config is the gateway's configuration: one YAML file, strictly
// decoded (an unknown field is an error), with every default applied in one
// place and environment variables (the quick knobs, listen addresses, state
// URLs) layered on top.
//
// Secrets never appear in the file: a provider names the environment
// variable that holds its key (api_key_env), and a literal api_key field is
// rejected as unknown.
//
// A Config is built by Load, Parse or Default and is not modified afterwards;
// its methods are then safe for concurrent use.
package config

import (
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
)

// Config is the gateway's configuration. The YAML names are snake_case
// versions of the field names. After Load, Parse or Default every default is
// applied: no field that has a default is left empty.
type Config struct {
	// Listen is the client-side address (127.0.0.1:8080).
	Listen string `yaml:"listen"`
	// AdminListen is the admin API's address (127.0.0.1:8081).
	AdminListen string `yaml:"admin_listen"`
	// DataDir holds the embedded SQLite files (./.sluice).
	DataDir string `yaml:"data_dir"`
	// Store is the URL of the counters and reservations: sqlite://,
	// memory://, redis://, rediss://, redis-cluster://host:port,... or
	// postgres://. Empty means SQLite under DataDir (see StoreURL).
	Store string `yaml:"store,omitempty"`
	// Database is the URL of keys, rules, overrides, ledger and audit:
	// sqlite:// or postgres://. Empty means SQLite under DataDir (see
	// DatabaseURL).
	Database string `yaml:"database,omitempty"`
	// MaxBodyBytes caps a request body (8 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxConnections caps the client connections held at once; one more is
	// answered 503 and closed. 0 means the process's descriptor limit less
	// 256 (kept for the stores, the catalog and the providers).
	MaxConnections int `yaml:"max_connections,omitempty"`
	// MaxConnectionsPerIP caps them per client address; 0 (the default)
	// is half of max_connections, so that no one address can hold every
	// place (set it to max_connections for none: many clients may share a
	// proxy's or a NAT's address).
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip,omitempty"`
	// TerminalStatus is the status of budget and session-ceiling refusals:
	// auto (the default: 429 with x-should-retry: false, or 402 to clients
	// that retry every 429, the Vercel AI SDK), 429, 402 or 400.
	TerminalStatus string `yaml:"terminal_status"`
	// MaxWait is the longest a request may wait for rate and concurrency
	// rules when it asks to (X-Sluice-Priority: batch, or X-Sluice-Max-Wait
	// for less) (30s). A tier's max_wait replaces it for its keys.
	MaxWait time.Duration `yaml:"max_wait"`
	// HeaderTimeout is how long a client connection may take to send a
	// request's headers (10s): one that never sends any is closed then.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// StoreTimeout bounds each call to a Redis or PostgreSQL counter store:
	// past it the call is answered 503 (or admitted, per on_store_error). 0
	// means the store's own default, 250ms for Redis and 400ms for
	// PostgreSQL; a busy host may need more.
	StoreTimeout time.Duration `yaml:"store_timeout,omitempty"`
	// CatalogTimeout bounds each lookup a client call makes in the catalog
	// (its key, its session) (250ms): past it the call is answered 503.
	CatalogTimeout time.Duration `yaml:"catalog_timeout"`
	// AdminTimeout bounds each admin API request's calls to the catalog and
	// the store (5s): past it the request is answered 503 with the cause.
	AdminTimeout time.Duration `yaml:"admin_timeout"`
	// RequestTimeout is the model deadline of a call (10m), written as a Go
	// duration ("90s", "10m").
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// ExpirySlack is added to a call's deadline before its reservation and
	// its concurrency leases expire (30s): how long after request_timeout
	// the places of a replica that died with calls in flight come back.
	ExpirySlack time.Duration `yaml:"expiry_slack"`
	// LeaseTimeout is how long the concurrency places and budget
	// reservations of a replica that stopped (crashed, killed, cut off from
	// the store) stay taken before the sweep settles them (2m, from 10s to
	// 1h): each replica renews its calls in flight every third of it, up to
	// request_timeout plus expiry_slack, so a call longer than the lease
	// keeps them. At request_timeout plus expiry_slack or more, a crashed
	// replica's places come back at its calls' deadline, as without it.
	LeaseTimeout time.Duration `yaml:"lease_timeout"`
	// RetryAfterBuffer is added to the hint of every rate and busy refusal
	// (Retry-After, retry-after-ms, retry_after_ms), a margin for clients
	// whose retry on the hint would otherwise arrive a little early. 0, the
	// default: measured with the official SDKs, a retry on Sluice's exact
	// hint is not refused again (BENCHMARKS.md). At most 10s.
	RetryAfterBuffer time.Duration `yaml:"retry_after_buffer,omitempty"`
	// Env is "development" (the default) or "production".
	Env string `yaml:"env"`
	// UpstreamRetries bounds the retries of a provider's 429 or 5xx before
	// any byte reached the client (2; 0 means no retry). Never nil after
	// Load, Parse or Default.
	UpstreamRetries *int `yaml:"upstream_retries"`
	// TrustedProxies lists the CIDRs (or single addresses) whose forwarded
	// client addresses are believed. Empty trusts none.
	TrustedProxies []string `yaml:"trusted_proxies,omitempty"`
	// PreAuthPerMinute bounds each client address's requests per minute
	// before authentication, per replica: a loose backstop against floods
	// and key guessing (0, the default, turns it off).
	PreAuthPerMinute int64 `yaml:"pre_auth_per_minute,omitempty"`

	Providers []Provider `yaml:"providers"`
	Models    []Model    `yaml:"models"`
	Rules     []Rule     `yaml:"rules,omitempty"`
	Tiers     []Tier     `yaml:"tiers,omitempty"`
	// Sessions are the terms of POST /v1/sessions.
	Sessions Sessions `yaml:"sessions,omitempty"`
	// Live configures live connections (GET /v1/realtime): live.go.
	Live Live `yaml:"live,omitempty"`
	// TenantModels are logical model names that serve a different model
	// per org, workspace or tier (see TenantModel).
	TenantModels []TenantModel `yaml:"tenant_models,omitempty"`
	// Auth lists the trusted identity records besides API keys.
	Auth Auth `yaml:"auth,omitempty"`
	// Metrics shapes what /metrics exports.
	Metrics Metrics `yaml:"metrics,omitempty"`
	// Usage is what the usage ledger keeps beside its daily sums.
	Usage Usage `yaml:"usage,omitempty"`
	// Events says where Sluice's events go besides the log and the audit
	// log: webhooks.
	Events Events `yaml:"events,omitempty"`
	// Cache bounds the response cache (models[].cache turns it on).
	Cache Cache `yaml:"cache,omitempty"`

	// Knobs holds the quick knobs that were set in the environment, by
	// variable name (EnvRatePerMinute, ...). Unset knobs are absent.
	Knobs map[string]int64 `yaml:"-"`

	// fromEnv names the environment variable that set a field, by YAML
	// name, so that problems point at the right place.
	fromEnv map[string]string
	// byModel indexes Models by name and alias; nil means scan.
	byModel map[string]*Model
	// mockFallback is set when the file named no provider and no model and
	// the built-in mock ones were used.
	mockFallback bool
	// missingKeys are warnings about provider keys absent from the
	// environment that Load or Parse read.
	missingKeys []string
}

// Environments.
const (
	EnvDevelopment = "development"
	EnvProduction  = "production"
)

// ProviderKind is the wire format a provider speaks.
type ProviderKind string

// Provider kinds.
const (
	KindOpenAI    ProviderKind = "openai"
	KindAnthropic ProviderKind = "anthropic"
	// KindOpenAICompatible is any server speaking OpenAI's API; its BaseURL
	// is required.
	KindOpenAICompatible ProviderKind = "openai-compatible"
	// KindAzure is Azure OpenAI: base_url is the resource's endpoint
	// (https://NAME.openai.azure.com) with api_version, for deployment
	// URLs, or its v1 API (https://NAME.openai.azure.com/openai/v1)
	// without; the key is sent as api-key. A model's upstream_name is its
	// deployment's name.
	KindAzure ProviderKind = "azure"
	// KindMock is the built-in mock provider: it needs no network, and no
	// BaseURL unless it runs apart (sluice mock).
	KindMock ProviderKind = "mock"
)

// Provider is an upstream API.
type Provider struct {
	Name string       `yaml:"name"`
	Kind ProviderKind `yaml:"kind"`
	// BaseURL is what the API's paths are appended to, as in the official
	// SDKs: https://api.openai.com/v1 for OpenAI, https://api.anthropic.com
	// for Anthropic (both filled in by default).
	BaseURL string `yaml:"base_url,omitempty"`
	// APIKeyEnv names the environment variable holding the provider's key
	// (OPENAI_API_KEY and ANTHROPIC_API_KEY by default for those kinds).
	APIKeyEnv string `yaml:"api_key_env,omitempty"`
	// Pace holds calls the provider's own rate-limit headers say it would
	// refuse, instead of sending them to be refused 429.
	Pace bool `yaml:"pace,omitempty"`
	// Organization and Project, on an openai or openai-compatible
	// provider, are sent as its OpenAI-Organization and OpenAI-Project
	// headers: the operator's account decides which of its projects pays,
	// and the client's own headers of those names are never forwarded.
	Organization string `yaml:"organization,omitempty"`
	Project      string `yaml:"project,omitempty"`
	// APIVersion, on an azure provider, is the api-version its deployment
	// URLs carry (2024-10-21, say); empty uses the v1 API.
	APIVersion string `yaml:"api_version,omitempty"`
	// OutputCapField is, on an openai-compatible provider, the chat field
	// that carries the output cap: max_completion_tokens (the default,
	// OpenAI's) or max_tokens, for a server that knows only the older
	// name and would leave a call capped in the other unbounded.
	OutputCapField string `yaml:"output_cap_field,omitempty"`
	// Circuit overrides when a deployment of the provider (one of its
	// models) is skipped for failing.
	Circuit Circuit `yaml:"circuit,omitempty"`
	// RequestsPerMinute and TokensPerMinute are the provider's limits per
	// model as the operator knows them, followed (by counting what is
	// sent) until its rate-limit headers say otherwise; 0 means none.
	RequestsPerMinute int64 `yaml:"requests_per_minute,omitempty"`
	TokensPerMinute   int64 `yaml:"tokens_per_minute,omitempty"`
}

// Circuit is a provider's circuit breaking: after Failures attempts in a
// row on one of its models fail (a connection error, a timeout, a 5xx), the
// model is skipped on that provider like a refusing one for Cooldown, then
// probed by one call; zero values are the defaults (5 and 30s).
type Circuit struct {
	Failures int           `yaml:"failures,omitempty"`
	Cooldown time.Duration `yaml:"cooldown,omitempty"`
}

// APIKey reads the provider's key from env; "" when it has none.
func (p *Provider) APIKey(env func(string) (string, bool)) string {
	if p.APIKeyEnv == "" || env == nil {
		return ""
	}
	v, _ := env(p.APIKeyEnv)
	return v
}

// Model is a model the gateway serves.
type Model struct {
	// Name is what clients ask for.
	Name string `yaml:"name"`
	// Provider names the Provider that serves it. With Deployments it
	// may be left out: it is then the first deployment's (whose price
	// list and tokenizer the model takes).
	Provider string `yaml:"provider"`
	// UpstreamName is the model's name at the provider (Name by default),
	// and its deployments' by default.
	UpstreamName string `yaml:"upstream_name"`
	// Deployments are several places the model is served from (providers,
	// keys, regions): a call goes to the one with the most room left and a
	// closed circuit. Empty: Provider alone serves it.
	Deployments []Deployment `yaml:"deployments,omitempty"`
	// Price is nil when the model has no price: its calls then cost 0
	// against cost budgets (and Warnings says so).
	Price *Prices `yaml:"price,omitempty"`
	// MaxOutputTokens caps a call's output; it is the output bound when a
	// client sends none. Required.
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	// ContextWindow is the model's input plus output limit in tokens; 0 means
	// unknown.
	ContextWindow int64 `yaml:"context_window,omitempty"`
	// Tokenizer is the encoding the gateway counts a prompt with to refuse
	// one certainly longer than ContextWindow: "o200k_base" or
	// "cl100k_base"; "none" counts nothing; empty picks the encoding of an
	// OpenAI model by its upstream name on an openai or azure provider,
	// and none elsewhere.
	Tokenizer string `yaml:"tokenizer,omitempty"`
	// Aliases are other names clients may use for it.
	Aliases []string `yaml:"aliases,omitempty"`
	// Fallbacks are the models tried, in order, when this one's rules refuse.
	Fallbacks []string `yaml:"fallbacks,omitempty"`
	// Cache, when set, keeps the model's answers in the response cache.
	Cache *ModelCache `yaml:"cache,omitempty"`
	// listed is the price list's row whose price the model took, when the
	// file gave none (see PriceListed).
	listed *ListedModel
}

// Deployment is one place a model is served from.
type Deployment struct {
	Provider string `yaml:"provider"`
	// UpstreamName is the model's name there; empty means the model's
	// UpstreamName.
	UpstreamName string `yaml:"upstream_name,omitempty"`
	// Weight shares calls among deployments with alike room (1 by
	// default).
	Weight int `yaml:"weight,omitempty"`
}

// ModelCache is a model's use of the response cache: identical requests of
// one org are answered from it for TTL.
type ModelCache struct {
	TTL time.Duration `yaml:"ttl"`
}

// Cache bounds the response cache. With a redis:// or redis-cluster://
// store the cache is in Redis, shared by every replica; otherwise it is in
// each process's memory.
type Cache struct {
	// MaxBytes bounds an in-process cache's keys and values (64 MiB).
	MaxBytes int64 `yaml:"max_bytes,omitempty"`
	// MaxEntryBytes caps one kept answer (1 MiB): a larger one is not kept.
	MaxEntryBytes int64 `yaml:"max_entry_bytes,omitempty"`
}

// Prices are a model's prices in dollars per million tokens.
type Prices struct {
	Input Dollars `yaml:"input"`
	// CachedInput prices input tokens read from a cache; nil means Input
	// (no discount is assumed, so budgets are never under-charged).
	CachedInput *Dollars `yaml:"cached_input,omitempty"`
	// CacheWrite prices input tokens written to a cache; nil means Input.
	CacheWrite *Dollars `yaml:"cache_write,omitempty"`
	Output     Dollars  `yaml:"output"`
	// AudioInput and AudioOutput price the audio tokens of live sessions
	// (GET /v1/realtime); nil means Input and Output.
	AudioInput  *Dollars `yaml:"audio_input,omitempty"`
	AudioOutput *Dollars `yaml:"audio_output,omitempty"`
}

// TokenizerNone is the tokenizer of a model whose prompts are not counted.
const TokenizerNone = "none"

// SluicePrice returns the model's price list for the engine; the zero Price
// when the model has none.
func (m *Model) SluicePrice() sluice.Price {
	if m.Price == nil {
		return sluice.Price{}
	}
	p := sluice.Price{
		Input:       int64(m.Price.Input),
		CachedInput: int64(m.Price.Input),
		CacheWrite:  int64(m.Price.Input),
		Output:      int64(m.Price.Output),
	}
	if m.Price.CachedInput != nil {
		p.CachedInput = int64(*m.Price.CachedInput)
	}
	if m.Price.CacheWrite != nil {
		p.CacheWrite = int64(*m.Price.CacheWrite)
	}
	if m.Price.AudioInput != nil {
		p.AudioInput = int64(*m.Price.AudioInput)
	}
	if m.Price.AudioOutput != nil {
		p.AudioOutput = int64(*m.Price.AudioOutput)
	}
	return p
}

// Rule is a limit as written in the file: sluice.Rule's fields under their
// yaml names (window as a Go duration, "1m"), and enabled. An org, a
// source or disabled is refused: the file holds the deployment's rules.
// Match.Models are matched by name, never by alias.
type Rule struct {
	sluice.Rule `yaml:",inline"`
	// Enabled is true by default; never nil after Load, Parse or Default.
	Enabled *bool `yaml:"enabled"`
}

// SluiceRule returns r as the engine's rule (Source is left for
// Resolve to set).
func (r *Rule) SluiceRule() sluice.Rule {
	sr := r.Rule
	sr.Disabled = r.Enabled != nil && !*r.Enabled
	// The caller's copy: a Config is not modified once loaded.
	sr.WarnAt = slices.Clone(sr.WarnAt)
	sr.Match.Models = slices.Clone(sr.Match.Models)
	sr.Match.Tiers = slices.Clone(sr.Match.Tiers)
	sr.Match.Routes = slices.Clone(sr.Match.Routes)
	return sr
}

// Tier scales every rule's limits for the requests whose identity carries
// its name (see sluice.Tier).
type Tier struct {
	Name string `yaml:"name"`
	// Percent of each limit that applies (100 = unchanged).
	Percent int64 `yaml:"percent"`
	// Promote, when set, moves an account to another tier once it is old
	// enough or has spent enough; the gateway applies it.
	Promote *Promotion `yaml:"promote,omitempty"`
	// SessionModel, when set, is the model of the tier's sessions.
	SessionModel string `yaml:"session_model,omitempty"`
	// MaxWait, when set, replaces the deployment's max_wait for the
	// tier's keys (a key's own max_wait replaces it in turn).
	MaxWait time.Duration `yaml:"max_wait,omitempty"`
	// Class, when set, is the priority class of the tier's requests on
	// rules with classes; a key's own class replaces it.
	Class string `yaml:"class,omitempty"`
	// Turns lets every key of the tier group its calls into turns
	// (X-Sluice-Turn), as a key's own turns setting does.
	Turns bool `yaml:"turns,omitempty"`
}

// TierTurns reports whether the keys of tier may group their calls into
// turns.
func (c *Config) TierTurns(tier string) bool {
	for _, t := range c.Tiers {
		if t.Name == tier {
			return t.Turns
		}
	}
	return false
}

// Sessions are the terms a session is minted with. A tier's percent scales
// the turn, token, cost and context ceilings; its session_model replaces
// Model.
type Sessions struct {
	// Model is the model sessions use (the first model when empty).
	Model string `yaml:"model,omitempty"`
	// MaxDuration is the wall-clock ceiling (1h).
	MaxDuration time.Duration `yaml:"max_duration,omitempty"`
	// MaxTurns, MaxTokens and MaxCost are the other ceilings; 0 is none.
	MaxTurns  int64   `yaml:"max_turns,omitempty"`
	MaxTokens int64   `yaml:"max_tokens,omitempty"`
	MaxCost   Dollars `yaml:"max_cost,omitempty"`
	// MaxContextTokens bounds the input tokens of any one call in a
	// session (the transcript it resends); 0 is none.
	MaxContextTokens int64 `yaml:"max_context_tokens,omitempty"`
	// MaxOpenPerUser caps a user's open sessions (5; 0 after defaults is
	// impossible, use a large number for none).
	MaxOpenPerUser int `yaml:"max_open_per_user,omitempty"`
}

// SessionTerms are the model and ceilings of a session (0: no ceiling).
type SessionTerms struct {
	Model       string
	MaxDuration time.Duration
	MaxTurns    int64
	MaxTokens   int64
	MaxCost     int64 // micro-dollars
	MaxContext  int64
}

// SessionTerms returns the terms of a session minted for tier.
func (c *Config) SessionTerms(tier string) SessionTerms {
	s := &c.Sessions
	model, pct := s.Model, int64(100)
	if i := slices.IndexFunc(c.Tiers, func(t Tier) bool { return t.Name == tier }); i >= 0 {
		pct = c.Tiers[i].Percent
		if c.Tiers[i].SessionModel != "" {
			model = c.Tiers[i].SessionModel
		}
	}
	if m, ok := c.Model(model); ok {
		model = m.Name // an alias names its model
	}
	scale := func(n int64) int64 {
		if n == 0 {
			return 0
		}
		return max(1, n*pct/100)
	}
	return SessionTerms{Model: model, MaxDuration: s.MaxDuration, MaxTurns: scale(s.MaxTurns), MaxTokens: scale(s.MaxTokens),
		MaxCost: scale(int64(s.MaxCost)), MaxContext: scale(s.MaxContextTokens)}
}

// Promotion moves an account from one tier to another once it reaches any
// one of its thresholds (at least one is set): an age, or usage settled
// over the account's life. The account is a key: its age is the key's,
// its usage what the ledger holds for it.
type Promotion struct {
	// After is the account's age at which it is promoted.
	After time.Duration `yaml:"after,omitempty"`
	// Tokens is the settled tokens (input plus output, as token budgets
	// count them) at which it is promoted.
	Tokens int64 `yaml:"tokens,omitempty"`
	// Cost is the settled spend at which it is promoted.
	Cost Dollars `yaml:"cost,omitempty"`
	// To names the tier it is promoted to.
	To string `yaml:"to"`
}

// Settled is an account's usage over its life, as the ledger holds it.
type Settled struct {
	Tokens int64
	Cost   int64 // micro-dollars
}

// reached reports whether an account of that age and settled usage has
// reached one of p's thresholds.
func (p *Promotion) reached(age time.Duration, used Settled) bool {
	return p.After > 0 && age >= p.After || p.Tokens > 0 && used.Tokens >= p.Tokens || p.Cost > 0 && used.Cost >= int64(p.Cost)
}

// PromotesByUsage reports whether a tier is promoted by settled usage, so
// that the gateway needs to read keys' usage from the ledger.
func (c *Config) PromotesByUsage() bool {
	return slices.ContainsFunc(c.Tiers, func(t Tier) bool { return t.Promote != nil && (t.Promote.Tokens > 0 || t.Promote.Cost > 0) })
}

// SluiceTiers returns the tiers for the engine's Policy.
func (c *Config) SluiceTiers() []sluice.Tier {
	tiers := make([]sluice.Tier, 0, len(c.Tiers))
	for _, t := range c.Tiers {
		tiers = append(tiers, sluice.Tier{Name: t.Name, Percent: t.Percent})
	}
	return tiers
}

// PromotedTier returns the tier an account of the given tier, age and
// settled usage is in once the tiers' promotions are applied: a tier one
// of whose thresholds the account has reached moves it to promote.to, and
// so on down the chain (each threshold is the account's age or lifetime
// usage, not what it did in the tier). A tier without a promotion, or
// whose thresholds are not reached, stays.
func (c *Config) PromotedTier(tier string, age time.Duration, used Settled) string {
	// Validate refuses cycles; the bound keeps an unvalidated config from
	// looping.
	for range len(c.Tiers) {
		i := slices.IndexFunc(c.Tiers, func(t Tier) bool { return t.Name == tier })
		if i < 0 || c.Tiers[i].Promote == nil || !c.Tiers[i].Promote.reached(age, used) {
			return tier
		}
		tier = c.Tiers[i].Promote.To
	}
	return tier
}

// Model returns the model that name or one of its aliases names.
func (c *Config) Model(name string) (*Model, bool) {
	if c.byModel != nil {
		m, ok := c.byModel[name]
		return m, ok
	}
	for i := range c.Models {
		if c.Models[i].Name == name {
			return &c.Models[i], true
		}
	}
	for i := range c.Models {
		for _, a := range c.Models[i].Aliases {
			if a == name {
				return &c.Models[i], true
			}
		}
	}
	return nil, false
}

// Price returns the price list of the model that name (or an alias) names;
// the zero Price for an unknown or unpriced model.
func (c *Config) Price(model string) sluice.Price {
	m, ok := c.Model(model)
	if !ok {
		return sluice.Price{}
	}
	return m.SluicePrice()
}

// Provider returns the provider named name.
func (c *Config) Provider(name string) (*Provider, bool) {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i], true
		}
	}
	return nil, false
}

// StoreURL is Store, or the SQLite file counters.db under DataDir when
// Store is empty.
func (c *Config) StoreURL() string {
	if c.Store != "" {
		return c.Store
	}
	return "sqlite://" + filepath.Join(c.DataDir, "counters.db")
}

// DatabaseURL is Database, or the SQLite file catalog.db under DataDir when
// Database is empty.
func (c *Config) DatabaseURL() string {
	if c.Database != "" {
		return c.Database
	}
	return "sqlite://" + filepath.Join(c.DataDir, "catalog.db")
}

// TrustedPrefixes returns TrustedProxies parsed; a single address is a
// prefix of its full length. Entries that do not parse are skipped
// (Validate reports them).
func (c *Config) TrustedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.TrustedProxies {
		if p, ok := parsePrefix(s); ok {
			out = append(out, p)
		}
	}
	return out
}

func parsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// IsProduction reports whether Env is production.
func (c *Config) IsProduction() bool { return c.Env == EnvProduction }
