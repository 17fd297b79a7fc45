package sluice_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// valid rules of each kind, for the table to spoil one field at a time.
func validRate() sluice.Rule {
	return sluice.Rule{Name: "r", Kind: sluice.KindRate, Subject: "workspace+user", Metric: sluice.MetricTokens, Limit: 1000, Window: time.Minute}
}

func validBudget() sluice.Rule {
	return sluice.Rule{Name: "b", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricCost, Limit: 1000, Period: sluice.PeriodDay}
}

func validConcurrency() sluice.Rule {
	return sluice.Rule{Name: "c", Kind: sluice.KindConcurrency, Subject: "server", Limit: 16}
}

func TestRule_ValidateReportsRuleAndField(t *testing.T) {
	with := func(r sluice.Rule, change func(*sluice.Rule)) sluice.Rule {
		change(&r)
		return r
	}
	tests := []struct {
		name  string
		rule  sluice.Rule
		field string // empty: valid
	}{
		{"valid rate", validRate(), ""},
		{"valid budget", validBudget(), ""},
		{"valid concurrency", validConcurrency(), ""},
		{"zero limit disables and is valid", with(validRate(), func(r *sluice.Rule) { r.Limit = 0 }), ""},
		{"default metric", with(validRate(), func(r *sluice.Rule) { r.Metric = "" }), ""},
		{"custom metric", with(validBudget(), func(r *sluice.Rule) { r.Metric = "audio_seconds_2" }), ""},
		{"global subject", with(validRate(), func(r *sluice.Rule) { r.Subject = "global" }), ""},
		{"composite of three", with(validRate(), func(r *sluice.Rule) { r.Subject = "org+workspace+tag" }), ""},
		{"time zone", with(validBudget(), func(r *sluice.Rule) { r.TimeZone = "Europe/London" }), ""},
		{"warn_at 1", with(validBudget(), func(r *sluice.Rule) { r.WarnAt = []float64{0.5, 1} }), ""},
		{"soft limit equal to limit", with(validBudget(), func(r *sluice.Rule) { r.SoftLimit = 1000 }), ""},
		{"fixed reserve", with(validBudget(), func(r *sluice.Rule) { r.Reserve, r.ReserveAmount = sluice.ReserveFixed, 800 }), ""},
		{"burst equal to min output", with(validRate(), func(r *sluice.Rule) { r.Burst, r.MinOutputTokens, r.Fit = 100, 100, "clamp" }), ""},
		{"every option spelled out", with(validBudget(), func(r *sluice.Rule) {
			r.Reserve, r.OnExpiry, r.OnStoreError, r.Mode = sluice.ReserveEstimate, sluice.ExpiryRelease, sluice.StoreErrorOpen, sluice.ModeShadow
		}), ""},

		{"empty name", with(validRate(), func(r *sluice.Rule) { r.Name = "" }), "name"},
		{"negative limit", with(validRate(), func(r *sluice.Rule) { r.Limit = -1 }), "limit"},
		{"negative budget limit", with(validBudget(), func(r *sluice.Rule) { r.Limit = math.MinInt64 }), "limit"},
		{"negative concurrency limit", with(validConcurrency(), func(r *sluice.Rule) { r.Limit = -5 }), "limit"},
		{"zero window", with(validRate(), func(r *sluice.Rule) { r.Window = 0 }), "window"},
		{"negative window", with(validRate(), func(r *sluice.Rule) { r.Window = -time.Second }), "window"},
		{"empty kind", with(validRate(), func(r *sluice.Rule) { r.Kind = "" }), "kind"},
		{"unknown kind", with(validRate(), func(r *sluice.Rule) { r.Kind = "leaky_bucket" }), "kind"},
		{"metric with capitals", with(validRate(), func(r *sluice.Rule) { r.Metric = "Tokens" }), "metric"},
		{"metric with a dash", with(validBudget(), func(r *sluice.Rule) { r.Metric = "audio-seconds" }), "metric"},
		{"metric with a space", with(validBudget(), func(r *sluice.Rule) { r.Metric = "audio seconds" }), "metric"},
		{"metric too long", with(validBudget(), func(r *sluice.Rule) { r.Metric = sluice.Metric(strings.Repeat("a", 65)) }), "metric"},
		{"concurrency metric on a rate", with(validRate(), func(r *sluice.Rule) { r.Metric = sluice.MetricConcurrency }), "metric"},
		{"concurrency metric on a budget", with(validBudget(), func(r *sluice.Rule) { r.Metric = sluice.MetricConcurrency }), "metric"},
		{"tokens on a concurrency rule", with(validConcurrency(), func(r *sluice.Rule) { r.Metric = sluice.MetricTokens }), "metric"},
		{"unknown time zone", with(validBudget(), func(r *sluice.Rule) { r.TimeZone = "Mars/Olympus_Mons" }), "time_zone"},
		{"empty period", with(validBudget(), func(r *sluice.Rule) { r.Period = "" }), "period"},
		{"bad period", with(validBudget(), func(r *sluice.Rule) { r.Period = "year" }), "period"},
		{"soft limit above limit", with(validBudget(), func(r *sluice.Rule) { r.SoftLimit = 1001 }), "soft_limit"},
		{"negative soft limit", with(validBudget(), func(r *sluice.Rule) { r.SoftLimit = -1 }), "soft_limit"},
		{"warn_at zero", with(validBudget(), func(r *sluice.Rule) { r.WarnAt = []float64{0} }), "warn_at"},
		{"warn_at above one", with(validBudget(), func(r *sluice.Rule) { r.WarnAt = []float64{0.5, 1.01} }), "warn_at"},
		{"warn_at negative", with(validBudget(), func(r *sluice.Rule) { r.WarnAt = []float64{-0.5} }), "warn_at"},
		{"warn_at NaN", with(validBudget(), func(r *sluice.Rule) { r.WarnAt = []float64{math.NaN()} }), "warn_at"},
		{"fixed reserve above the limit", with(validBudget(), func(r *sluice.Rule) { r.Reserve, r.ReserveAmount = sluice.ReserveFixed, 8000 }), "reserve_amount"},
		{"fixed reserve without amount", with(validBudget(), func(r *sluice.Rule) { r.Reserve = sluice.ReserveFixed }), "reserve_amount"},
		{"fixed reserve negative amount", with(validBudget(), func(r *sluice.Rule) { r.Reserve, r.ReserveAmount = sluice.ReserveFixed, -1 }), "reserve_amount"},
		{"unknown reserve", with(validBudget(), func(r *sluice.Rule) { r.Reserve = "everything" }), "reserve"},
		{"burst below min output tokens", with(validRate(), func(r *sluice.Rule) { r.Burst, r.MinOutputTokens, r.Fit = 100, 101, "clamp" }), "burst"},
		{"negative burst", with(validRate(), func(r *sluice.Rule) { r.Burst = -1 }), "burst"},
		{"negative min output tokens", with(validRate(), func(r *sluice.Rule) { r.MinOutputTokens = -1 }), "min_output_tokens"},
		{"empty subject", with(validRate(), func(r *sluice.Rule) { r.Subject = "" }), "subject"},
		{"repeated attribute", with(validRate(), func(r *sluice.Rule) { r.Subject = "workspace+workspace" }), "subject"},
		{"global combined", with(validRate(), func(r *sluice.Rule) { r.Subject = "global+user" }), "subject"},
		{"server combined", with(validRate(), func(r *sluice.Rule) { r.Subject = "user+server" }), "subject"},
		{"unknown attribute", with(validRate(), func(r *sluice.Rule) { r.Subject = "nope" }), "subject"},
		{"trailing plus", with(validRate(), func(r *sluice.Rule) { r.Subject = "workspace+" }), "subject"},
		{"plural tags", with(validRate(), func(r *sluice.Rule) { r.Subject = "tags" }), "subject"},
		{"unknown expiry policy", with(validBudget(), func(r *sluice.Rule) { r.OnExpiry = "forget" }), "on_expiry"},
		{"unknown store error policy", with(validBudget(), func(r *sluice.Rule) { r.OnStoreError = "ajar" }), "on_store_error"},
		{"unknown mode", with(validRate(), func(r *sluice.Rule) { r.Mode = "dry_run" }), "mode"},
		{"unknown fit", with(validRate(), func(r *sluice.Rule) { r.Fit = "squeeze" }), "fit"},
		{"provider limit per model", with(validRate(), func(r *sluice.Rule) { r.Subject, r.LimitFrom = "model", sluice.LimitFromProvider }), ""},
		{"provider limit on one model", with(validRate(), func(r *sluice.Rule) {
			r.Subject, r.Metric, r.LimitFrom, r.Match.Models = "global", sluice.MetricInputTokens, sluice.LimitFromProvider, []string{"m"}
		}), ""},
		{"unknown limit source", with(validRate(), func(r *sluice.Rule) { r.Subject, r.LimitFrom = "model", "catalog" }), "limit_from"},
		{"provider limit on a budget", with(validBudget(), func(r *sluice.Rule) { r.Subject, r.LimitFrom = "model", sluice.LimitFromProvider }), "limit_from"},
		{"provider limit of cost", with(validRate(), func(r *sluice.Rule) {
			r.Subject, r.Metric, r.LimitFrom = "model", sluice.MetricCost, sluice.LimitFromProvider
		}), "limit_from"},
		{"provider limit per workspace", with(validRate(), func(r *sluice.Rule) { r.Subject, r.LimitFrom = "workspace", sluice.LimitFromProvider }), "limit_from"},
		{"global provider limit on every model", with(validRate(), func(r *sluice.Rule) { r.Subject, r.LimitFrom = "global", sluice.LimitFromProvider }), "limit_from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rule.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var re *sluice.RuleError
			if !errors.As(err, &re) {
				t.Fatalf("Validate() = %#v, want a *sluice.RuleError", err)
			}
			if re.Rule != tt.rule.Name || re.Field != tt.field {
				t.Fatalf("RuleError names rule %q field %q, want rule %q field %q (%v)", re.Rule, re.Field, tt.rule.Name, tt.field, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, `"`+tt.rule.Name+`"`) || !strings.Contains(msg, tt.field) || re.Message == "" {
				t.Fatalf("message %q does not name the rule %q and field %q", msg, tt.rule.Name, tt.field)
			}
			// A Limiter refuses the same rule with the same error.
			_, newErr := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: []sluice.Rule{tt.rule}})
			if newErr == nil || newErr.Error() != msg {
				t.Fatalf("New with the rule: %v, want %v", newErr, err)
			}
		})
	}
}

// A rule whose burst defaults to its limit has the same floor as one with an
// explicit burst: a bucket smaller than one request's minimum output can
// never fit it.
func TestRule_ValidateDefaultBurstBelowMinOutputTokens(t *testing.T) {
	r := validRate()
	r.Limit, r.MinOutputTokens, r.Fit = 100, 200, "clamp"
	var re *sluice.RuleError
	if err := r.Validate(); !errors.As(err, &re) || re.Field != "burst" {
		t.Fatalf("Validate() = %v, want a burst error: the bucket holds 100 and a request needs 200", err)
	}
}

func TestPolicy_DuplicateRuleName(t *testing.T) {
	a, b := validRate(), validBudget()
	b.Name = a.Name
	_, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: []sluice.Rule{a, b}})
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Rule != a.Name || re.Field != "name" {
		t.Fatalf("New with two rules named %q: %v, want a RuleError on name", a.Name, err)
	}
	// A Simple limit takes a name too.
	clash := validRate()
	clash.Name = "simple_rpm"
	_, err = sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Simple: sluice.Simple{RequestsPerMinute: 10}, Rules: []sluice.Rule{clash}})
	if !errors.As(err, &re) || re.Rule != "simple_rpm" || re.Field != "name" {
		t.Fatalf("New with a rule named like a simple limit: %v, want a RuleError on name", err)
	}
}

func TestPolicy_InvalidOverridesAndTiers(t *testing.T) {
	rules := []sluice.Rule{rpm(10)}
	tests := []struct {
		name   string
		policy sluice.Policy
		want   []string // substrings of the error
	}{
		{"override for an unknown rule",
			sluice.Policy{Rules: rules, Overrides: []sluice.Override{{Rule: "rpn", Attribute: "key", Value: "k", Limit: ptr[int64](5)}}},
			[]string{`"rpn"`, "no rule"}},
		{"override on an unknown attribute",
			sluice.Policy{Rules: rules, Overrides: []sluice.Override{{Rule: "rpm", Attribute: "colour", Value: "k"}}},
			[]string{`"rpm"`, `"colour"`}},
		{"override on a non-identity attribute",
			sluice.Policy{Rules: rules, Overrides: []sluice.Override{{Rule: "rpm", Attribute: "model", Value: "gpt"}}},
			[]string{`"rpm"`, `"model"`}},
		{"override on global",
			sluice.Policy{Rules: rules, Overrides: []sluice.Override{{Rule: "rpm", Attribute: "global"}}},
			[]string{`"global"`}},
		{"override with a negative limit",
			sluice.Policy{Rules: rules, Overrides: []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "k", Limit: ptr[int64](-1)}}},
			[]string{`"rpm"`, "negative"}},
		{"override with a negative burst",
			sluice.Policy{Rules: rules, Overrides: []sluice.Override{{Rule: "rpm", Attribute: "user", Value: "u", Burst: ptr[int64](-1)}}},
			[]string{`"rpm"`, "negative"}},
		{"tier without percent", sluice.Policy{Rules: rules, Tiers: []sluice.Tier{{Name: "new"}}}, []string{`"new"`, "percent"}},
		{"tier with a negative percent", sluice.Policy{Rules: rules, Tiers: []sluice.Tier{{Name: "new", Percent: -50}}}, []string{`"new"`, "percent"}},
		{"tier without name", sluice.Policy{Rules: rules, Tiers: []sluice.Tier{{Percent: 50}}}, []string{"name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := withRules(t, rules...)
			err := l.SetPolicy(tt.policy)
			if err == nil {
				t.Fatal("SetPolicy accepted an invalid policy")
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestLimiter_SetPolicyInvalidKeepsOldPolicy(t *testing.T) {
	l, _ := withRules(t, rpm(2))
	admit(t, l, byKey("k"))
	bad := rpm(100)
	bad.Window = 0
	err := l.SetPolicy(sluice.Policy{Rules: []sluice.Rule{bad}})
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Field != "window" {
		t.Fatalf("SetPolicy(bad window) = %v, want a RuleError on window", err)
	}
	err = l.SetPolicy(sluice.Policy{Rules: []sluice.Rule{rpm(100)}, Tiers: []sluice.Tier{{Name: "free"}}})
	if err == nil {
		t.Fatal("SetPolicy accepted a tier without percent")
	}
	if got := l.Policy().Rules; len(got) != 1 || got[0].Limit != 2 {
		t.Fatalf("policy in force %+v, want the old rpm of 2", got)
	}
	// Admissions still follow the old limit of 2, not 100.
	admit(t, l, byKey("k"))
	refuse(t, l, byKey("k"), sluice.ErrRateLimited)
	// And a valid policy then applies at once.
	if err := l.SetPolicy(sluice.Policy{Rules: []sluice.Rule{rpm(3)}}); err != nil {
		t.Fatal(err)
	}
	if n := admitN(t, l, byKey("k2"), 10); n != 3 {
		t.Fatalf("admitted %d under the new limit of 3", n)
	}
}

func TestNew_RequiresStore(t *testing.T) {
	if _, err := sluice.New(sluice.Options{}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Fatalf("New without a store: %v", err)
	}
}

func TestLimiter_AdmitWithoutRulesAdmits(t *testing.T) {
	l, _ := withRules(t)
	r := admit(t, l, tokens("k", 1, 1))
	if res := r.Result(); res.Rule != "" || len(r.Charges()) != 0 {
		t.Fatalf("result %+v with %d charges, want none", res, len(r.Charges()))
	}
	settle(t, r, sluice.Usage{InputTokens: 1})
	if got := l.Stats(); got.Admitted != 1 || got.Refused != 0 {
		t.Fatalf("stats %+v", got)
	}
	if _, err := l.Admit(context.Background(), sluice.Request{Max: sluice.Usage{InputTokens: -1}}); !errors.Is(err, sluice.ErrInvalidUsage) {
		t.Fatalf("admit with a negative bound: %v, want ErrInvalidUsage", err)
	}
}

func TestDuration_JSON(t *testing.T) {
	var d sluice.Duration
	if err := json.Unmarshal([]byte(`"90s"`), &d); err != nil || time.Duration(d) != 90*time.Second {
		t.Fatalf("90s: %v, %v", d, err)
	}
	for _, bad := range []string{`60`, `"sixty"`, `true`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	b, _ := json.Marshal(sluice.Duration(time.Minute))
	if string(b) != `"1m0s"` {
		t.Fatalf("marshal = %s", b)
	}
}
