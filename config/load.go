package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The defaults applied to what a file leaves out.
const (
	DefaultListen           = "127.0.0.1:8080"
	DefaultAdminListen      = "127.0.0.1:8081"
	DefaultDataDir          = "./.sluice"
	DefaultMaxBodyBytes     = 8 << 20
	DefaultHeaderTimeout    = 10 * time.Second
	DefaultCatalogTimeout   = 250 * time.Millisecond
	DefaultAdminTimeout     = 5 * time.Second
	DefaultRequestTimeout   = 10 * time.Minute
	DefaultExpirySlack      = 30 * time.Second
	DefaultLeaseTimeout     = 2 * time.Minute
	DefaultMaxWait          = 30 * time.Second
	DefaultUpstreamRetries  = 2
	DefaultOpenAIBaseURL    = "https://api.openai.com/v1"
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	DefaultOpenAIKeyEnv     = "OPENAI_API_KEY"
	DefaultAnthropicKeyEnv  = "ANTHROPIC_API_KEY"
	DefaultAzureKeyEnv      = "AZURE_OPENAI_API_KEY"
)

// The environment variables that Load and Parse read. A variable that is
// unset or empty changes nothing.
const (
	VarListen      = "SLUICE_LISTEN"
	VarAdminListen = "SLUICE_ADMIN_LISTEN"
	VarDataDir     = "SLUICE_DATA_DIR"
	VarStore       = "SLUICE_STORE"
	VarDatabase    = "SLUICE_DATABASE"
	VarEnv         = "SLUICE_ENV"
	// DefaultSessionDuration and DefaultSessionsPerUser are the session
	// terms' wall-clock ceiling and cap of open sessions per user.
	DefaultSessionDuration = time.Hour
	DefaultSessionsPerUser = 5

	// The quick knobs: each sets the limit of one rule; 0 disables it.
	VarRatePerMinute    = "SLUICE_RATE_PER_MINUTE"
	VarDailyTokenBudget = "SLUICE_DAILY_TOKEN_BUDGET"
	VarMaxInFlight      = "SLUICE_MAX_IN_FLIGHT"
)

//go:embed default.yaml
var defaultYAML []byte

// Default returns the configuration that `sluice serve` runs with when it is
// given no file: the built-in mock provider with the models mock-small and
// mock-large, and no rules of its own (the quick knobs provide them at their
// defaults). It reads no environment.
func Default() *Config {
	c, err := Parse(defaultYAML, nil)
	if err != nil {
		// The embedded file is a constant checked by the tests.
		panic("config: the embedded default is invalid: " + err.Error())
	}
	return c
}

// Load reads the configuration file at path and layers env on top (see
// Parse). An empty path means the embedded default, with env applied. env is
// usually os.LookupEnv; nil reads nothing.
func Load(path string, env func(string) (string, bool)) (*Config, error) {
	if path == "" {
		return parse(defaultYAML, env)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := parse(data, env)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes one YAML document strictly (an unknown field is an error),
// applies the environment variables read through env (the Var constants),
// applies the defaults, and validates the result. The error lists every
// problem found; it is an *Error underneath.
func Parse(data []byte, env func(string) (string, bool)) (*Config, error) {
	c, err := parse(data, env)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

func parse(data []byte, env func(string) (string, bool)) (*Config, error) {
	c := &Config{}
	if err := decode(data, c); err != nil {
		return nil, err
	}
	problems := c.applyEnv(env)
	c.applyDefaults()
	problems = append(problems, c.problems()...)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	c.indexModels()
	c.missingKeys = missingKeys(c.Providers, env)
	return c, nil
}

// decode reads exactly one YAML document into c; an empty file is an empty
// configuration.
func decode(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return decodeError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return decodeError(err)
	default:
		return &Error{Problems: []*FieldError{{
			Path:    fmt.Sprintf("line %d", extra.Line),
			Message: "a second YAML document: a config file holds one",
		}}}
	}
}

// decodeError turns the decoder's messages ("line 3: field x not found in
// type config.Provider") into problems.
func decodeError(err error) error {
	var messages []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		messages = te.Errors
	} else {
		messages = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	e := &Error{}
	for _, m := range messages {
		p := &FieldError{Message: m}
		if strings.HasPrefix(m, "line ") {
			if path, rest, ok := strings.Cut(m, ": "); ok {
				p.Path, p.Message = path, rest
			}
		}
		switch {
		case strings.HasPrefix(p.Message, "field api_key not found"):
			p.Message += " (secrets come from the environment: name the variable in api_key_env)"
		case strings.HasPrefix(p.Message, "field secret not found"):
			p.Message += " (secrets come from the environment: name the variable in secret_env)"
		default:
			if near := suggestField(p.Message); near != "" {
				p.Message += "; did you mean " + near + "?"
			}
		}
		e.Problems = append(e.Problems, p)
	}
	return e
}

// applyEnv layers the environment over the file.
func (c *Config) applyEnv(env func(string) (string, bool)) []*FieldError {
	if env == nil {
		return nil
	}
	for _, f := range []struct {
		variable, field string
		dst             *string
	}{
		{VarListen, "listen", &c.Listen},
		{VarAdminListen, "admin_listen", &c.AdminListen},
		{VarDataDir, "data_dir", &c.DataDir},
		{VarStore, "store", &c.Store},
		{VarDatabase, "database", &c.Database},
		{VarEnv, "env", &c.Env},
	} {
		if v, ok := env(f.variable); ok && v != "" {
			*f.dst = v
			if c.fromEnv == nil {
				c.fromEnv = map[string]string{}
			}
			c.fromEnv[f.field] = f.variable
		}
	}
	var problems []*FieldError
	for _, k := range quickKnobs {
		raw, ok := env(k.variable)
		v := strings.TrimSpace(raw)
		if !ok || v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			problems = append(problems, &FieldError{Path: k.variable, Message: fmt.Sprintf("%q is too large", raw)})
			continue
		case err != nil:
			problems = append(problems, &FieldError{Path: k.variable, Message: fmt.Sprintf("%q is not a whole number (0 disables the limit)", raw)})
			continue
		case n < 0:
			problems = append(problems, &FieldError{Path: k.variable, Message: fmt.Sprintf("must not be negative (0 disables the limit), got %d", n)})
			continue
		}
		if c.Knobs == nil {
			c.Knobs = map[string]int64{}
		}
		c.Knobs[k.variable] = n
	}
	return problems
}

// applyDefaults fills in every default: this is the one place they are
// applied.
func (c *Config) applyDefaults() {
	setString := func(s *string, def string) {
		if *s == "" {
			*s = def
		}
	}
	setString(&c.Listen, DefaultListen)
	setString(&c.AdminListen, DefaultAdminListen)
	setString(&c.DataDir, DefaultDataDir)
	setString(&c.Env, EnvDevelopment)
	setString(&c.TerminalStatus, "auto")
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.CatalogTimeout == 0 {
		c.CatalogTimeout = DefaultCatalogTimeout
	}
	if c.AdminTimeout == 0 {
		c.AdminTimeout = DefaultAdminTimeout
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.ExpirySlack == 0 {
		c.ExpirySlack = DefaultExpirySlack
	}
	if c.LeaseTimeout == 0 {
		c.LeaseTimeout = DefaultLeaseTimeout
	}
	if c.UpstreamRetries == nil {
		n := DefaultUpstreamRetries
		c.UpstreamRetries = &n
	}
	// A file that names no provider and no model (only listen addresses, or
	// only rules) still serves something: the built-in mock models.
	if len(c.Providers) == 0 && len(c.Models) == 0 {
		var builtin Config
		if err := decode(defaultYAML, &builtin); err == nil && len(builtin.Providers) > 0 {
			c.Providers, c.Models = builtin.Providers, builtin.Models
			c.mockFallback = true
		}
	}
	for i := range c.Providers {
		p := &c.Providers[i]
		switch p.Kind {
		case KindOpenAI:
			setString(&p.BaseURL, DefaultOpenAIBaseURL)
			setString(&p.APIKeyEnv, DefaultOpenAIKeyEnv)
		case KindAnthropic:
			setString(&p.BaseURL, DefaultAnthropicBaseURL)
			setString(&p.APIKeyEnv, DefaultAnthropicKeyEnv)
		case KindAzure:
			setString(&p.APIKeyEnv, DefaultAzureKeyEnv)
		}
	}
	for i := range c.Models {
		m := &c.Models[i]
		setString(&m.UpstreamName, m.Name)
		if len(m.Deployments) > 0 {
			setString(&m.Provider, m.Deployments[0].Provider)
		}
		if p, ok := c.Provider(m.Provider); ok {
			priceFromList(m, p.Kind, KnownPrices())
		}
		if m.Price != nil {
			if m.Price.CachedInput == nil {
				v := m.Price.Input
				m.Price.CachedInput = &v
			}
			if m.Price.CacheWrite == nil {
				v := m.Price.Input
				m.Price.CacheWrite = &v
			}
		}
	}
	if len(c.Models) > 0 {
		setString(&c.Sessions.Model, c.Models[0].Name)
	}
	if c.Sessions.MaxDuration == 0 {
		c.Sessions.MaxDuration = DefaultSessionDuration
	}
	if c.Sessions.MaxOpenPerUser == 0 {
		c.Sessions.MaxOpenPerUser = DefaultSessionsPerUser
	}
	c.Auth.applyDefaults()
	for i := range c.Rules {
		if c.Rules[i].Enabled == nil {
			enabled := true
			c.Rules[i].Enabled = &enabled
		}
	}
}

// indexModels builds the lookup by name and alias; Validate has made sure
// no name is used twice.
func (c *Config) indexModels() {
	c.byModel = make(map[string]*Model, len(c.Models))
	for i := range c.Models {
		m := &c.Models[i]
		c.byModel[m.Name] = m
		for _, a := range m.Aliases {
			c.byModel[a] = m
		}
	}
}

// missingKeys lists the providers whose key variable is unset or empty.
func missingKeys(providers []Provider, env func(string) (string, bool)) []string {
	if env == nil {
		return nil
	}
	var out []string
	for i := range providers {
		p := &providers[i]
		if p.APIKeyEnv != "" && p.APIKey(env) == "" {
			out = append(out, fmt.Sprintf("provider %q: %s is not set: calls go upstream without a key unless the client brings its own", p.Name, p.APIKeyEnv))
		}
	}
	return out
}
