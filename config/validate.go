package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/names"
)

// FieldError is one problem with a configuration. Path names where it is:
// a field path such as models[1].provider, an environment variable such as
// SLUICE_RATE_PER_MINUTE, or "line N" of the file for a decoding error.
type FieldError struct {
	Path    string
	Message string
	// Err is the underlying error, such as the *sluice.RuleError of an
	// invalid rule; often nil.
	Err error
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

// Error lists every problem found in a configuration: environment
// variables first, then the file section by section.
type Error struct {
	Problems []*FieldError
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so errors.As finds a *FieldError or a
// *sluice.RuleError among them.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// Validate reports every problem with c as an *Error, or nil. Parse and Load
// call it; a Config built in Go should be checked with it too.
func (c *Config) Validate() error {
	if p := c.problems(); len(p) > 0 {
		return &Error{Problems: p}
	}
	return nil
}

// checker collects problems.
type checker struct {
	c        *Config
	problems []*FieldError
}

func (v *checker) add(path, format string, args ...any) {
	v.problems = append(v.problems, &FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// top names a top-level field, and the variable that set it if one did.
func (v *checker) top(field string) string {
	if variable, ok := v.c.fromEnv[field]; ok {
		return field + " (" + variable + ")"
	}
	return field
}

func (c *Config) problems() []*FieldError {
	v := &checker{c: c}
	v.server()
	v.providers()
	v.models()
	v.rules()
	v.tiers()
	v.sessions()
	v.live()
	v.tenantModels()
	v.auth()
	v.metrics()
	v.usage()
	v.events()
	return v.problems
}

func (v *checker) sessions() {
	s := &v.c.Sessions
	if _, ok := v.c.Model(s.Model); !ok && s.Model != "" {
		v.add("sessions.model", "unknown model %q", s.Model)
	}
	if s.MaxDuration < 0 {
		v.add("sessions.max_duration", "must be positive, got %v", s.MaxDuration)
	}
	if s.MaxTurns < 0 || s.MaxTokens < 0 || s.MaxCost < 0 || s.MaxContextTokens < 0 {
		v.add("sessions", "ceilings must not be negative (0 is none)")
	}
	if s.MaxOpenPerUser < 0 {
		v.add("sessions.max_open_per_user", "must be positive, got %d", s.MaxOpenPerUser)
	}
	for i, t := range v.c.Tiers {
		if _, ok := v.c.Model(t.SessionModel); !ok && t.SessionModel != "" {
			v.add(fmt.Sprintf("tiers[%d].session_model", i), "unknown model %q", t.SessionModel)
		}
	}
}

func (v *checker) server() {
	c := v.c
	v.address(v.top("listen"), c.Listen)
	v.address(v.top("admin_listen"), c.AdminListen)
	if c.Listen == c.AdminListen && c.Listen != "" && !strings.HasSuffix(c.Listen, ":0") {
		v.add(v.top("admin_listen"), "is the same address as listen (%s)", c.Listen)
	}
	if c.DataDir == "" {
		v.add(v.top("data_dir"), "is empty")
	}
	v.stateURL(v.top("store"), c.Store, "sqlite", "memory", "redis", "rediss", "redis-cluster", "postgres", "postgresql")
	v.stateURL(v.top("database"), c.Database, "sqlite", "postgres", "postgresql")
	if c.Cache.MaxBytes < 0 || c.Cache.MaxEntryBytes < 0 {
		v.add("cache", "max_bytes and max_entry_bytes must not be negative (0 means the default)")
	}
	if c.MaxBodyBytes <= 0 {
		v.add("max_body_bytes", "must be positive, got %d", c.MaxBodyBytes)
	}
	if c.RequestTimeout <= 0 {
		v.add("request_timeout", "must be positive, got %v", c.RequestTimeout)
	}
	if c.ExpirySlack < time.Second || c.ExpirySlack > time.Hour {
		// Below a second, a settlement delayed by a busy store could find
		// its reservation already swept.
		v.add("expiry_slack", "must be from 1s to 1h, got %v", c.ExpirySlack)
	}
	if c.LeaseTimeout < 10*time.Second || c.LeaseTimeout > time.Hour {
		// Renewed every third of it: below 10s, a store slow for a few
		// seconds would let the calls of a live replica be swept.
		v.add("lease_timeout", "must be from 10s to 1h, got %v", c.LeaseTimeout)
	}
	if c.MaxWait < 0 || c.MaxWait > time.Hour {
		v.add("max_wait", "must be from 1ms to 1h, got %v", c.MaxWait)
	}
	if c.RetryAfterBuffer < 0 || c.RetryAfterBuffer > 10*time.Second {
		v.add("retry_after_buffer", "must be from 0 to 10s, got %v", c.RetryAfterBuffer)
	}
	if c.Env != EnvDevelopment && c.Env != EnvProduction {
		v.add(v.top("env"), "must be development or production, not %q", c.Env)
	}
	if r := c.UpstreamRetries; r != nil && (*r < 0 || *r > 10) {
		v.add("upstream_retries", "must be between 0 and 10, got %d", *r)
	}
	switch c.TerminalStatus {
	case "auto", "429", "402", "400":
	default:
		v.add("terminal_status", "must be auto, 429, 402 or 400, not %q", c.TerminalStatus)
	}
	if c.MaxConnections < 0 {
		v.add("max_connections", "must not be negative (0 means the descriptor limit less 256), got %d", c.MaxConnections)
	}
	if c.MaxConnectionsPerIP < 0 {
		v.add("max_connections_per_ip", "must not be negative (0 sets no cap), got %d", c.MaxConnectionsPerIP)
	}
	if c.HeaderTimeout < 0 || c.HeaderTimeout > 10*time.Minute {
		v.add("header_timeout", "must be between 1ms and 10m, got %v", c.HeaderTimeout)
	}
	if c.StoreTimeout < 0 || c.StoreTimeout > 10*time.Second {
		v.add("store_timeout", "must be between 1ms and 10s (0: the store's default), got %v", c.StoreTimeout)
	}
	if c.CatalogTimeout < 0 || c.CatalogTimeout > 10*time.Second {
		v.add("catalog_timeout", "must be between 1ms and 10s, got %v", c.CatalogTimeout)
	}
	if c.AdminTimeout < 0 || c.AdminTimeout > 10*time.Minute {
		v.add("admin_timeout", "must be between 1ms and 10m, got %v", c.AdminTimeout)
	}
	if c.PreAuthPerMinute < 0 {
		v.add("pre_auth_per_minute", "must not be negative (0 turns it off), got %d", c.PreAuthPerMinute)
	}
	for i, s := range c.TrustedProxies {
		if _, ok := parsePrefix(s); !ok {
			v.add(fmt.Sprintf("trusted_proxies[%d]", i), "%q is not a CIDR (like 10.0.0.0/8) or an IP address", s)
		}
	}
	for _, k := range quickKnobs {
		if n, ok := c.Knobs[k.variable]; ok && n < 0 {
			v.add(k.variable, "must not be negative (0 disables the limit), got %d", n)
		}
	}
}

func (v *checker) address(path, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(path, "%q is not a host:port address", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(path, "%q: port must be a number from 0 to 65535", addr)
	}
}

// stateURL checks the scheme of a store or database URL; empty, or
// sqlite:// with no file, means the embedded SQLite under the data
// directory.
func (v *checker) stateURL(path, s string, schemes ...string) {
	if s == "" {
		return
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !slices.Contains(schemes, scheme) {
		v.add(path, "%q: the scheme must be one of %s://", redactURL(s), strings.Join(schemes, "://, "))
		return
	}
	if rest == "" && scheme != "memory" && scheme != "sqlite" {
		v.add(path, "%q: names no host or file", s)
	}
}

// redactURL hides a password in a URL that is quoted in a message.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
	}
	return s
}

var providerKinds = []ProviderKind{KindOpenAI, KindAnthropic, KindOpenAICompatible, KindAzure, KindMock}

func (v *checker) providers() {
	seen := map[string]int{}
	for i := range v.c.Providers {
		p := &v.c.Providers[i]
		at := fmt.Sprintf("providers[%d]", i)
		v.name(at, p.Name, seen, i, "providers")
		if !slices.Contains(providerKinds, p.Kind) {
			v.add(at+".kind", "unknown kind %q (use openai, anthropic, openai-compatible, azure or mock)", p.Kind)
		}
		if p.BaseURL == "" && (p.Kind == KindOpenAICompatible || p.Kind == KindAzure) {
			v.add(at+".base_url", "is required for kind %s", p.Kind)
		}
		if p.APIVersion != "" && p.Kind != KindAzure {
			v.add(at+".api_version", "is for azure providers")
		}
		if p.Kind == KindAzure && p.APIVersion == "" && p.BaseURL != "" && !strings.HasSuffix(strings.TrimSuffix(p.BaseURL, "/"), "/openai/v1") {
			v.add(at+".base_url", "an azure provider without api_version uses the v1 API: the base URL ends in /openai/v1 (https://NAME.openai.azure.com/openai/v1), or set api_version for deployment URLs")
		}
		if p.BaseURL != "" {
			u, err := url.Parse(p.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.add(at+".base_url", "%q is not an http:// or https:// URL", p.BaseURL)
			}
		}
		if (p.Organization != "" || p.Project != "") && p.Kind != KindOpenAI && p.Kind != KindOpenAICompatible {
			v.add(at, "organization and project are OpenAI headers: only an openai or openai-compatible provider sends them")
		}
		switch p.OutputCapField {
		case "", "max_completion_tokens":
		case "max_tokens":
			if p.Kind != KindOpenAICompatible && p.Kind != KindAzure {
				v.add(at+".output_cap_field", "is for openai-compatible and azure providers")
			}
		default:
			v.add(at+".output_cap_field", "must be max_completion_tokens or max_tokens, not %q", p.OutputCapField)
		}
		if p.Circuit.Failures < 0 || p.Circuit.Cooldown < 0 {
			v.add(at+".circuit", "failures and cooldown must not be negative (0 is the default: 5 failures, 30s)")
		}
		if p.RequestsPerMinute < 0 || p.TokensPerMinute < 0 {
			v.add(at, "requests_per_minute and tokens_per_minute must not be negative (0: none)")
		}
		if p.APIKeyEnv != "" && !isVariableName(p.APIKeyEnv) {
			v.add(at+".api_key_env", "must name an environment variable (like OPENAI_API_KEY), not hold the key itself")
		}
	}
}

// name checks that a list element's name is set and unique.
func (v *checker) name(at, name string, seen map[string]int, i int, list string) {
	if name == "" {
		v.add(at+".name", "is empty")
		return
	}
	if j, dup := seen[name]; dup {
		v.add(at+".name", "%q is also the name of %s[%d]", name, list, j)
		return
	}
	seen[name] = i
}

func isVariableName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

func (v *checker) models() {
	c := v.c
	if len(c.Models) == 0 {
		v.add("models", "none defined: the gateway serves only the models listed here")
		return
	}
	names := map[string]int{}
	for i := range c.Models {
		v.name(fmt.Sprintf("models[%d]", i), c.Models[i].Name, names, i, "models")
	}
	// aliases maps each alias to the model that first claimed it.
	aliases := map[string]int{}
	for i := range c.Models {
		m := &c.Models[i]
		at := fmt.Sprintf("models[%d]", i)
		switch _, ok := c.Provider(m.Provider); {
		case m.Provider == "":
			v.add(at+".provider", "is empty")
		case !ok:
			v.add(at+".provider", "unknown provider %q", m.Provider)
		}
		v.deployments(at, m)
		if m.MaxOutputTokens <= 0 {
			v.add(at+".max_output_tokens", "must be positive, got %d", m.MaxOutputTokens)
		}
		if m.ContextWindow < 0 {
			v.add(at+".context_window", "must not be negative (0 means unknown), got %d", m.ContextWindow)
		} else if m.ContextWindow > 0 && m.MaxOutputTokens > m.ContextWindow {
			v.add(at+".max_output_tokens", "%d is larger than context_window (%d)", m.MaxOutputTokens, m.ContextWindow)
		}
		if m.Cache != nil && m.Cache.TTL <= 0 {
			v.add(at+".cache.ttl", "must be positive, got %v", m.Cache.TTL)
		}
		switch m.Tokenizer {
		case "", TokenizerNone, "o200k_base", "cl100k_base":
		default:
			v.add(at+".tokenizer", "must be o200k_base, cl100k_base or none, got %q", m.Tokenizer)
		}
		v.price(at+".price", m.Price)
		for j, a := range m.Aliases {
			path := fmt.Sprintf("%s.aliases[%d]", at, j)
			if a == "" {
				v.add(path, "is empty")
				continue
			}
			if k, ok := names[a]; ok {
				if k == i {
					v.add(path, "%q is the model's own name", a)
				} else {
					v.add(path, "%q is the name of models[%d]", a, k)
				}
				continue
			}
			if k, ok := aliases[a]; ok {
				v.add(path, "%q is also an alias of models[%d] (%q)", a, k, c.Models[k].Name)
				continue
			}
			aliases[a] = i
		}
	}
	for i := range c.Models {
		m := &c.Models[i]
		listed := map[int]bool{}
		for j, f := range m.Fallbacks {
			path := fmt.Sprintf("models[%d].fallbacks[%d]", i, j)
			k, ok := names[f]
			if !ok {
				k, ok = aliases[f]
			}
			switch {
			case !ok:
				v.add(path, "unknown model %q", f)
			case k == i:
				v.add(path, "%q is the model itself: a model cannot fall back to itself", f)
			case listed[k]:
				v.add(path, "%q is listed twice", c.Models[k].Name)
			}
			listed[k] = true
		}
	}
}

func (v *checker) price(at string, p *Prices) {
	if p == nil {
		return
	}
	for _, d := range []struct {
		field string
		value *Dollars
	}{{"input", &p.Input}, {"cached_input", p.CachedInput}, {"cache_write", p.CacheWrite}, {"output", &p.Output},
		{"audio_input", p.AudioInput}, {"audio_output", p.AudioOutput}} {
		if d.value != nil && *d.value < 0 {
			v.add(at+"."+d.field, "must not be negative, got %v", *d.value)
		}
	}
}

func (v *checker) rules() {
	c := v.c
	names := map[string]int{}
	invalid := map[string]bool{}
	for i := range c.Rules {
		r := &c.Rules[i]
		at := fmt.Sprintf("rules[%d]", i)
		if r.Name != "" {
			v.name(at, r.Name, names, i, "rules")
		}
		sr := r.SluiceRule()
		if err := sr.Validate(); err != nil {
			invalid[r.Name] = true
			var re *sluice.RuleError
			if errors.As(err, &re) {
				v.problems = append(v.problems, &FieldError{Path: at + "." + re.Field, Message: re.Message, Err: err})
			} else {
				v.problems = append(v.problems, &FieldError{Path: at, Message: err.Error(), Err: err})
			}
		}
		for j, name := range r.Match.Models {
			path := fmt.Sprintf("%s.match.models[%d]", at, j)
			m, ok := c.Model(name)
			_, tenant := c.TenantModel(name)
			switch {
			case !ok && tenant:
				v.add(path, "%q is a tenant model name: match the models it serves (a rule counts the model that served)", name)
			case !ok:
				v.add(path, "unknown model %q", name)
			case m.Name != name:
				v.add(path, "%q is an alias: match the model's name %q (a rule counts every request the model serves, whatever it was called)", name, m.Name)
			}
		}
	}
	// A knob's limit can break a file rule that is valid on its own (a
	// soft_limit above the knob's lower limit).
	for _, r := range c.Layers()[2].Rules {
		if invalid[r.Name] {
			continue
		}
		if err := r.Validate(); err != nil {
			v.problems = append(v.problems, &FieldError{
				Path:    c.knobVariable(r.Name),
				Message: fmt.Sprintf("makes rule %q invalid: %v", r.Name, err),
				Err:     err,
			})
		}
	}
}

// className refuses a priority class that is not a name (names.Check);
// empty is none.
func (v *checker) className(at, class string) {
	if class == "" {
		return
	}
	if err := names.Check(class); err != nil {
		v.add(at, "%v", err)
	}
}

func (v *checker) tiers() {
	c := v.c
	names := map[string]int{}
	for i := range c.Tiers {
		v.name(fmt.Sprintf("tiers[%d]", i), c.Tiers[i].Name, names, i, "tiers")
	}
	for i := range c.Tiers {
		t := &c.Tiers[i]
		at := fmt.Sprintf("tiers[%d]", i)
		if t.Percent <= 0 {
			v.add(at+".percent", "must be positive (100 means unchanged), got %d", t.Percent)
		}
		if t.MaxWait < 0 || t.MaxWait > time.Hour {
			v.add(at+".max_wait", "must be from 1ms to 1h (or unset for the deployment's), got %v", t.MaxWait)
		}
		v.className(at+".class", t.Class)
		if t.Promote == nil {
			continue
		}
		switch p := t.Promote; {
		case p.After < 0:
			v.add(at+".promote.after", "must be a positive duration, got %v", p.After)
		case p.Tokens < 0:
			v.add(at+".promote.tokens", "must be positive, got %d", p.Tokens)
		case p.After == 0 && p.Tokens == 0 && p.Cost == 0:
			v.add(at+".promote", "needs after (a key's age), tokens or cost (its settled usage)")
		}
		switch _, ok := names[t.Promote.To]; {
		case t.Promote.To == "":
			v.add(at+".promote.to", "is empty")
		case t.Promote.To == t.Name:
			v.add(at+".promote.to", "%q is the tier itself", t.Promote.To)
		case !ok:
			v.add(at+".promote.to", "unknown tier %q", t.Promote.To)
		}
	}
	// A chain of promotions that comes back to a tier it left would move an
	// account round it forever.
	for i := range c.Tiers {
		seen := map[string]bool{c.Tiers[i].Name: true}
		for t := &c.Tiers[i]; t.Promote != nil; {
			j, ok := names[t.Promote.To]
			if !ok {
				break
			}
			if seen[t.Promote.To] {
				v.add(fmt.Sprintf("tiers[%d].promote", i), "promotions from %q come back to %q: a cycle", c.Tiers[i].Name, t.Promote.To)
				break
			}
			seen[t.Promote.To] = true
			t = &c.Tiers[j]
		}
	}
}

// deployments checks a model's deployments: known providers, each place
// once, no negative weight.
func (v *checker) deployments(at string, m *Model) {
	seen := map[string]bool{}
	for j, d := range m.Deployments {
		path := fmt.Sprintf("%s.deployments[%d]", at, j)
		switch _, ok := v.c.Provider(d.Provider); {
		case d.Provider == "":
			v.add(path+".provider", "is empty")
		case !ok:
			v.add(path+".provider", "unknown provider %q", d.Provider)
		}
		up := d.UpstreamName
		if up == "" {
			up = m.UpstreamName
		}
		if seen[d.Provider+"/"+up] {
			v.add(path, "%s/%s is listed twice", d.Provider, up)
		}
		seen[d.Provider+"/"+up] = true
		if d.Weight < 0 {
			v.add(path+".weight", "must not be negative, got %d", d.Weight)
		}
	}
}
