package config

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // testdata names IANA zones; do not depend on the host's

	"github.com/sluicehq/sluice"
)

func TestParse_QuickKnobs(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		want      map[string]int64 // effective limit by rule name
		wantKnobs map[string]int64
		wantErr   string
	}{
		{
			name: "unset: built-in defaults",
			want: map[string]int64{RuleRatePerMinute: 20, RuleDailyTokenBudget: 2_000_000, RuleMaxInFlight: 16},
		},
		{
			name:      "set",
			env:       map[string]string{VarRatePerMinute: "60", VarDailyTokenBudget: "500000", VarMaxInFlight: " 4 "},
			want:      map[string]int64{RuleRatePerMinute: 60, RuleDailyTokenBudget: 500_000, RuleMaxInFlight: 4},
			wantKnobs: map[string]int64{VarRatePerMinute: 60, VarDailyTokenBudget: 500_000, VarMaxInFlight: 4},
		},
		{
			name:      "0 disables, the others keep their defaults",
			env:       map[string]string{VarDailyTokenBudget: "0"},
			want:      map[string]int64{RuleRatePerMinute: 20, RuleDailyTokenBudget: 0, RuleMaxInFlight: 16},
			wantKnobs: map[string]int64{VarDailyTokenBudget: 0},
		},
		{
			name: "empty is unset",
			env:  map[string]string{VarMaxInFlight: ""},
			want: map[string]int64{RuleRatePerMinute: 20, RuleDailyTokenBudget: 2_000_000, RuleMaxInFlight: 16},
		},
		{
			name:    "negative",
			env:     map[string]string{VarRatePerMinute: "-1"},
			wantErr: "SLUICE_RATE_PER_MINUTE: must not be negative (0 disables the limit), got -1",
		},
		{
			name:    "not an integer",
			env:     map[string]string{VarDailyTokenBudget: "2e6"},
			wantErr: `SLUICE_DAILY_TOKEN_BUDGET: "2e6" is not a whole number (0 disables the limit)`,
		},
		{
			name:    "fraction",
			env:     map[string]string{VarMaxInFlight: "1.5"},
			wantErr: `SLUICE_MAX_IN_FLIGHT: "1.5" is not a whole number`,
		},
		{
			name:    "too large",
			env:     map[string]string{VarMaxInFlight: "99999999999999999999"},
			wantErr: `SLUICE_MAX_IN_FLIGHT: "99999999999999999999" is too large`,
		},
		{
			name:    "every bad knob is reported",
			env:     map[string]string{VarRatePerMinute: "fast", VarMaxInFlight: "-3"},
			wantErr: "2 problems:\n\tSLUICE_RATE_PER_MINUTE: \"fast\" is not a whole number (0 disables the limit)\n\tSLUICE_MAX_IN_FLIGHT: must not be negative",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load("", envOf(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Knobs, tt.wantKnobs) {
				t.Errorf("Knobs = %v, want %v", c.Knobs, tt.wantKnobs)
			}
			rules := c.EffectiveRules()
			if len(rules) != 3 {
				t.Fatalf("effective rules = %+v, want the three knob rules", rules)
			}
			for name, limit := range tt.want {
				if got := ruleNamed(rules, name); got.Limit != limit {
					t.Errorf("%s limit = %d, want %d", name, got.Limit, limit)
				}
			}
		})
	}
}

// TestConfig_DefaultRules pins the shape of the knob rules.
func TestConfig_DefaultRules(t *testing.T) {
	want := []sluice.Rule{
		{Name: "rate_per_minute", Kind: sluice.KindRate, Subject: "workspace+user", Metric: sluice.MetricRequests, Limit: 20, Window: time.Minute},
		{Name: "daily_token_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 2_000_000, Period: sluice.PeriodDay},
		{Name: "max_in_flight", Kind: sluice.KindConcurrency, Subject: "server", Metric: sluice.MetricConcurrency, Limit: 16, BusyRetryAfter: 5 * time.Second},
	}
	got := DefaultRules()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DefaultRules() = %+v\nwant %+v", got, want)
	}
	for _, r := range got {
		if err := r.Validate(); err != nil {
			t.Errorf("default rule %s: %v", r.Name, err)
		}
	}
	got[0].Limit = 1
	if DefaultRules()[0].Limit != 20 {
		t.Error("DefaultRules returned shared storage")
	}
}

// TestConfig_LayersPrecedence checks the resolution order: the file
// overrides a default by rule name, the environment overrides both, and a
// disabled limit stays in the list.
func TestConfig_LayersPrecedence(t *testing.T) {
	const file = `
rules:
  - name: rate_per_minute
    kind: rate
    subject: key
    limit: 100
    window: 10s
  - name: daily_token_budget
    kind: budget
    subject: org
    metric: tokens
    limit: 9000000
    period: month
  - name: per_ip
    kind: rate
    subject: ip
    limit: 0
    window: 1m
`
	tests := []struct {
		name string
		env  map[string]string
		// want lists name, source, subject and limit of every effective rule,
		// in order.
		want []string
		// envRules lists the names in the "env" layer.
		envRules []string
	}{
		{
			name: "file over defaults",
			want: []string{
				"rate_per_minute config key 100",
				"daily_token_budget config org 9000000",
				"max_in_flight default server 16",
				"per_ip config ip 0",
			},
		},
		{
			name: "environment over file and defaults",
			env:  map[string]string{VarRatePerMinute: "7", VarMaxInFlight: "0"},
			want: []string{
				"rate_per_minute env key 7",
				"daily_token_budget config org 9000000",
				"max_in_flight env server 0",
				"per_ip config ip 0",
			},
			envRules: []string{"rate_per_minute", "max_in_flight"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(file), envOf(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			layers := c.Layers()
			var sources []string
			for _, l := range layers {
				sources = append(sources, l.Source)
			}
			if !slices.Equal(sources, []string{"default", "config", "env"}) {
				t.Fatalf("layer sources = %v", sources)
			}
			if len(layers[0].Rules) != 3 || len(layers[1].Rules) != 3 {
				t.Errorf("default layer has %d rules, config layer %d", len(layers[0].Rules), len(layers[1].Rules))
			}
			var envNames []string
			for _, r := range layers[2].Rules {
				envNames = append(envNames, r.Name)
			}
			if !slices.Equal(envNames, tt.envRules) {
				t.Errorf("env layer = %v, want %v", envNames, tt.envRules)
			}
			var got []string
			for _, r := range Resolve(layers...) {
				got = append(got, strings.Join([]string{r.Name, r.Source, r.Subject, strconv.FormatInt(r.Limit, 10)}, " "))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("resolved:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			// The env layer keeps the file's shape of a knob rule.
			if r := ruleNamed(Resolve(layers...), RuleRatePerMinute); r.Window != 10*time.Second {
				t.Errorf("rate_per_minute window = %v, want the file's 10s", r.Window)
			}
		})
	}
}

func TestConfig_WarningsForDisabledLimits(t *testing.T) {
	const file = `
env: production
providers: [{name: p, kind: mock}]
models:
  - {name: priced, provider: p, max_output_tokens: 10, price: {input: 1, output: 2}}
  - {name: free, provider: p, max_output_tokens: 10}
rules:
  - {name: daily_token_budget, kind: budget, subject: workspace, metric: tokens, limit: 0, period: day}
  - {name: per_key, kind: concurrency, subject: key, limit: 2, enabled: false}
`
	c, err := Parse([]byte(file), envOf(map[string]string{VarRatePerMinute: "0", VarMaxInFlight: "8"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`limit "rate_per_minute" is disabled (SLUICE_RATE_PER_MINUTE=0): nothing is counted or refused by it`,
		`limit "daily_token_budget" is disabled (its limit is 0 in the config rules): nothing is counted or refused by it`,
		`limit "per_key" is disabled (enabled: false in the config rules): nothing is counted or refused by it`,
		`model "free" has no price: its calls cost 0 against cost budgets`,
	}
	if got := c.Warnings(); !slices.Equal(got, want) {
		t.Errorf("Warnings() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestParse_KnobBreaksFileRule checks that a knob's limit is validated
// against the file's rule it changes.
func TestParse_KnobBreaksFileRule(t *testing.T) {
	const file = `
rules:
  - {name: daily_token_budget, kind: budget, subject: workspace, metric: tokens, limit: 1000, soft_limit: 800, period: day}
`
	_, err := Parse([]byte(file), envOf(map[string]string{VarDailyTokenBudget: "500"}))
	if err == nil || !strings.Contains(err.Error(), `SLUICE_DAILY_TOKEN_BUDGET: makes rule "daily_token_budget" invalid`) {
		t.Fatalf("error = %v", err)
	}
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Field != "soft_limit" {
		t.Errorf("error does not wrap the rule's soft_limit problem: %v", err)
	}
	// 0 disables the rule; its soft limit no longer matters.
	if _, err := Parse([]byte(file), envOf(map[string]string{VarDailyTokenBudget: "0"})); err != nil {
		t.Errorf("disabling by knob: %v", err)
	}
}

func TestParse_EnvValuesAreValidated(t *testing.T) {
	_, err := Parse(nil, envOf(map[string]string{VarEnv: "prod", VarStore: "mongodb://x"}))
	for _, want := range []string{
		`env (SLUICE_ENV): must be development or production, not "prod"`,
		`store (SLUICE_STORE): "mongodb://x": the scheme must be one of`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
}

// TestParse_SQLiteWithoutFile: SLUICE_STORE=sqlite:// names the default
// file under the data directory, as the docs say; a database or store URL
// with no host is still refused.
func TestParse_SQLiteWithoutFile(t *testing.T) {
	c, err := Parse(nil, envOf(map[string]string{VarStore: "sqlite://"}))
	if err != nil {
		t.Fatalf("SLUICE_STORE=sqlite://: %v", err)
	}
	if c.StoreURL() != "sqlite://" {
		t.Errorf("store %q", c.StoreURL())
	}
	_, err = Parse(nil, envOf(map[string]string{VarStore: "redis://"}))
	if err == nil || !strings.Contains(err.Error(), `"redis://": names no host or file`) {
		t.Errorf("SLUICE_STORE=redis://: error %v", err)
	}
}

// TestParse_ExpirySlack: 30s unless set; from 1s to 1h.
func TestParse_ExpirySlack(t *testing.T) {
	c, err := Parse(nil, nil)
	if err != nil || c.ExpirySlack != 30*time.Second {
		t.Fatalf("default: %v, %v", c.ExpirySlack, err)
	}
	c, err = Parse([]byte("expiry_slack: 5s\n"), nil)
	if err != nil || c.ExpirySlack != 5*time.Second {
		t.Fatalf("5s: %v, %v", c.ExpirySlack, err)
	}
	for _, bad := range []string{"500ms", "2h", "-1s"} {
		_, err := Parse([]byte("expiry_slack: "+bad+"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), "expiry_slack: must be from 1s to 1h") {
			t.Errorf("expiry_slack %s: error %v", bad, err)
		}
	}
}

// TestParse_LeaseTimeout: 2m unless set; from 10s to 1h.
func TestParse_LeaseTimeout(t *testing.T) {
	c, err := Parse(nil, nil)
	if err != nil || c.LeaseTimeout != 2*time.Minute {
		t.Fatalf("default: %v, %v", c.LeaseTimeout, err)
	}
	c, err = Parse([]byte("lease_timeout: 45s\n"), nil)
	if err != nil || c.LeaseTimeout != 45*time.Second {
		t.Fatalf("45s: %v, %v", c.LeaseTimeout, err)
	}
	for _, bad := range []string{"9s", "2h", "-1m"} {
		_, err := Parse([]byte("lease_timeout: "+bad+"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), "lease_timeout: must be from 10s to 1h") {
			t.Errorf("lease_timeout %s: error %v", bad, err)
		}
	}
}

// TestParse_RetryAfterBuffer: 0 unless set.
func TestParse_RetryAfterBuffer(t *testing.T) {
	c, err := Parse(nil, nil)
	if err != nil || c.RetryAfterBuffer != 0 {
		t.Fatalf("default: %v, %v", c.RetryAfterBuffer, err)
	}
	c, err = Parse([]byte("retry_after_buffer: 250ms\n"), nil)
	if err != nil || c.RetryAfterBuffer != 250*time.Millisecond {
		t.Fatalf("250ms: %v, %v", c.RetryAfterBuffer, err)
	}
}
