package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicehttp"
)

// fromProvider is a rule of requests per minute per model that takes its
// limit from the provider, limit until the provider has said.
func fromProvider(limit int64) sluice.Rule {
	return sluice.Rule{Name: "provider_rpm", Kind: sluice.KindRate, Subject: "model", Limit: limit, Window: time.Minute,
		LimitFrom: sluice.LimitFromProvider}
}

// onModel is a request of no cost for model m.
func onModel(m string) sluice.Request {
	r := byKey("k")
	r.Identity.Model = m
	return r
}

// TestLimiter_ProviderLimitsSetTheLimit: a rule from the provider admits
// up to its own limit until the provider says, then up to what the
// provider allows, higher or lower, from the next admission on; a refusal
// and the effective limits say the provider set it. Other models keep the
// rule's own limit.
func TestLimiter_ProviderLimitsSetTheLimit(t *testing.T) {
	l, _ := withRules(t, fromProvider(2))
	ctx := context.Background()
	admit(t, l, onModel("m"))
	admit(t, l, onModel("m"))
	err := refuse(t, l, onModel("m"), sluice.ErrRateLimited)
	var rl *sluice.RateLimitError
	if !errors.As(err, &rl) || rl.Limit != 2 || rl.Source == sluice.LimitFromProvider || strings.Contains(err.Error(), "the provider's limit") {
		t.Fatalf("before the provider said: %v (limit %d, source %q)", err, rl.Limit, rl.Source)
	}

	l.SetProviderLimits("m", sluice.ProviderLimits{Requests: 5})
	for i := range 3 {
		if _, err := l.Admit(ctx, onModel("m")); err != nil {
			t.Fatalf("call %d of 5 the provider allows: %v", 3+i, err)
		}
	}
	err = refuse(t, l, onModel("m"), sluice.ErrRateLimited)
	if !errors.As(err, &rl) || rl.Limit != 5 || rl.Source != sluice.LimitFromProvider || !strings.Contains(err.Error(), "the provider's limit") {
		t.Fatalf("the sixth call: %v (limit %d, source %q)", err, rl.Limit, rl.Source)
	}
	hr, _ := sluicehttp.RefusalOf(err)
	if hr.Limit == nil || hr.Limit.Source != sluice.LimitFromProvider || hr.Limit.Limit != 5 {
		t.Fatalf("refusal's limit object: %+v", hr.Limit)
	}
	if e := effective(t, l, onModel("m").Identity, "provider_rpm"); e.Limit != 5 || e.Source != sluice.LimitFromProvider || e.Used != 5 {
		t.Fatalf("effective for m: %+v", e)
	}
	if e := effective(t, l, onModel("n").Identity, "provider_rpm"); e.Limit != 2 || e.Source == sluice.LimitFromProvider {
		t.Fatalf("effective for a model the provider said nothing of: %+v", e)
	}

	// More room at once; then less, below what is used.
	l.SetProviderLimits("m", sluice.ProviderLimits{Requests: 6})
	admit(t, l, onModel("m"))
	l.SetProviderLimits("m", sluice.ProviderLimits{Requests: 3})
	refuse(t, l, onModel("m"), sluice.ErrRateLimited)

	// The zero ProviderLimits forgets: the rule's own limit again.
	l.SetProviderLimits("m", sluice.ProviderLimits{})
	if e := effective(t, l, onModel("m").Identity, "provider_rpm"); e.Limit != 2 || e.Source == sluice.LimitFromProvider {
		t.Fatalf("effective once forgotten: %+v", e)
	}
}

// TestLimiter_ProviderLimitsPerWindow: a provider's count is converted to
// the rule's window and metric; a count it did not give leaves the rule's
// own limit; a tier scales the provider's figure as it would the rule's.
func TestLimiter_ProviderLimitsPerWindow(t *testing.T) {
	rules := []sluice.Rule{
		{Name: "rps", Kind: sluice.KindRate, Subject: "model", Limit: 1, Window: time.Second, LimitFrom: sluice.LimitFromProvider},
		{Name: "tp10m", Kind: sluice.KindRate, Subject: "model", Metric: sluice.MetricTokens, Limit: 7, Window: 10 * time.Minute, LimitFrom: sluice.LimitFromProvider},
		{Name: "input_tpm", Kind: sluice.KindRate, Subject: "global", Metric: sluice.MetricInputTokens, Limit: 9, Window: time.Minute,
			LimitFrom: sluice.LimitFromProvider, Match: sluice.Match{Models: []string{"m"}}},
		{Name: "rpm_own", Kind: sluice.KindRate, Subject: "model", Limit: 4, Window: time.Minute},
	}
	l, _ := newLimiter(t, sluice.Options{Rules: rules, Tiers: []sluice.Tier{{Name: "new", Percent: 50}}})
	l.SetProviderLimits("m", sluice.ProviderLimits{Requests: 90, Tokens: 1_000_000})
	id := onModel("m").Identity
	for _, want := range []struct {
		rule   string
		limit  int64
		source string
	}{
		{"rps", 1, sluice.LimitFromProvider}, // 90 a minute: 1.5 a second, rounded down
		{"tp10m", 10_000_000, sluice.LimitFromProvider},
		{"input_tpm", 9, ""}, // the provider gave no input-token count
		{"rpm_own", 4, ""},   // a rule of its own limit
	} {
		if e := effective(t, l, id, want.rule); e.Limit != want.limit || e.Source != want.source {
			t.Errorf("%s: limit %d from %q, want %d from %q", want.rule, e.Limit, e.Source, want.limit, want.source)
		}
	}
	l.SetProviderLimits("m", sluice.ProviderLimits{Requests: 7200, InputTokens: 600, Per: time.Hour})
	if e := effective(t, l, id, "rps"); e.Limit != 2 {
		t.Errorf("7,200 an hour: %d a second, want 2", e.Limit)
	}
	if e := effective(t, l, id, "input_tpm"); e.Limit != 10 || e.Source != sluice.LimitFromProvider {
		t.Errorf("600 input tokens an hour: %d a minute from %q, want 10 from the provider", e.Limit, e.Source)
	}
	id.Tier = "new"
	if e := effective(t, l, id, "input_tpm"); e.Limit != 5 || e.Source != "tier" {
		t.Errorf("on a tier of 50%%: %d from %q, want 5 from the tier", e.Limit, e.Source)
	}
}

// TestLimiter_ProviderHoldRefusesUntilItEnds: while the provider asked to
// wait (a 429's retry hint), a rule from the provider refuses at once,
// with the hint, charging nothing; a call that may wait waits for it; once
// the hint has passed, the rule admits again. Other models are not held.
func TestLimiter_ProviderHoldRefusesUntilItEnds(t *testing.T) {
	l, clock := withRules(t, fromProvider(100))
	l.SetProviderLimits("m", sluice.ProviderLimits{Requests: 100, HeldUntil: start.Add(1500 * time.Millisecond)})
	err := refuse(t, l, onModel("m"), sluice.ErrRateLimited)
	var rl *sluice.RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter != 1500*time.Millisecond || rl.Source != sluice.LimitFromProvider ||
		!rl.ResetAt.Equal(start.Add(1500*time.Millisecond)) || rl.Rule != "provider_rpm" {
		t.Fatalf("held: %v (%+v)", err, rl)
	}
	if e := effective(t, l, onModel("m").Identity, "provider_rpm"); e.Used != 0 {
		t.Fatalf("a held call was charged: %+v", e)
	}
	admit(t, l, onModel("n"))

	wait := onModel("m")
	wait.MaxWait = 5 * time.Second
	done := admitAsync(context.Background(), l, wait)
	waitTimers(t, clock, headTimers)
	pending(t, done, "before the hold ends")
	clock.Advance(1500 * time.Millisecond)
	if o := result(t, done); o.err != nil {
		t.Fatalf("a call that may wait: %v, want admitted once the hold ended", o.err)
	}
	admit(t, l, onModel("m"))
}
