package sluice_test

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestLimiter_EffectiveReportsSourceAndHeadroom(t *testing.T) {
	budget := daily(sluice.MetricTokens, 1000)
	budget.Mode = sluice.ModeShadow
	// As config.Resolve gives them: the file's rpm in place of the
	// default's, each rule with its layer's source.
	rules := []sluice.Rule{rpm(10), budget, inFlight(3)}
	rules[0].Source, rules[1].Source, rules[2].Source = "config", "default", "default"
	l, clock := withRules(t, rules...)
	r := admit(t, l, tokens("k", 100, 200))
	admit(t, l, byKey("k"))
	admit(t, l, byKey("k"))
	all, err := l.Effective(context.Background(), ident("k"))
	if err != nil {
		t.Fatal(err)
	}
	want := []sluice.Headroom{
		{Rule: "rpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricRequests, Limit: 10, Source: "config",
			Mode: sluice.ModeEnforce, Used: 3, Remaining: 7, ResetAt: start.Add(18 * time.Second), Window: time.Minute},
		{Rule: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1000, Source: "default",
			Mode: sluice.ModeShadow, Used: 300, Remaining: 700, ResetAt: time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC), Window: 24 * time.Hour},
		{Rule: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Metric: sluice.MetricConcurrency, Limit: 3, Source: "default",
			Mode: sluice.ModeEnforce, Used: 3, Remaining: 0, ResetAt: start.Add(90 * time.Second)},
	}
	for i := range min(len(all), len(want)) {
		if all[i].ResetAt.Equal(want[i].ResetAt) {
			all[i].ResetAt = want[i].ResetAt
		}
	}
	if !reflect.DeepEqual(all, want) {
		t.Fatalf("Effective =\n%+v\nwant\n%+v", all, want)
	}
	// Headroom is live: settling refunds the budget, time refills the
	// bucket.
	settle(t, r, sluice.Usage{InputTokens: 100, OutputTokens: 20})
	clock.Advance(12 * time.Second)
	if e := effective(t, l, ident("k"), "daily"); e.Used != 120 || e.Remaining != 880 {
		t.Fatalf("budget after settle: used %d remaining %d, want 120 and 880", e.Used, e.Remaining)
	}
	if e := effective(t, l, ident("k"), "rpm"); e.Used != 1 || e.Remaining != 9 {
		t.Fatalf("rate 12s later: used %d remaining %d, want 1 and 9", e.Used, e.Remaining)
	}
	if e := effective(t, l, ident("k"), "inflight"); e.Used != 2 || e.Remaining != 1 {
		t.Fatalf("inflight after one settle: used %d remaining %d, want 2 and 1", e.Used, e.Remaining)
	}
}

func TestLimiter_EffectiveConcurrencyCountsLeases(t *testing.T) {
	l, _ := withRules(t, inFlight(2))
	admit(t, l, byKey("k"))
	if e := effective(t, l, ident("k"), "inflight"); e.Used != 1 || e.Remaining != 1 {
		t.Fatalf("one lease: %+v", e)
	}
	admit(t, l, byKey("k"))
	refuse(t, l, byKey("k"), sluice.ErrBusy)
	if e := effective(t, l, ident("k"), "inflight"); e.Used != 2 || e.Remaining != 0 {
		t.Fatalf("two leases: %+v", e)
	}
}

func TestLimiter_EffectiveSkipsRulesThatDoNotApply(t *testing.T) {
	big := rpm(1)
	big.Name, big.Match.Models = "big_model", []string{"big"}
	off := rpm(1)
	off.Name, off.Disabled = "off", true
	zero := rpm(0)
	zero.Name = "zero"
	l, _ := withRules(t, big, off, zero, rpm(5))
	id := ident("k")
	if applies(t, l, id, "big_model") || applies(t, l, id, "off") || applies(t, l, id, "zero") || !applies(t, l, id, "rpm") {
		t.Fatal("Effective lists rules that do not apply to an identity without a model")
	}
	id.Model = "big"
	if !applies(t, l, id, "big_model") {
		t.Fatal("Effective omits the model rule for its model")
	}
}

func TestOverride_Resolution(t *testing.T) {
	limit := func(n int64) *int64 { return &n }
	tests := []struct {
		name       string
		overrides  []sluice.Override
		id         sluice.Identity
		wantLimit  int64 // 0: the rule does not apply
		wantBurst  int64
		wantSource string
	}{
		{"no override", nil, ident("k"), 10, 0, "config"},
		{"limit", []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "k", Limit: limit(3)}}, ident("k"), 3, 0, "override"},
		{"other subject unaffected", []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "other", Limit: limit(3)}}, ident("k"), 10, 0, "config"},
		{"NULL limit inherits", []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "k", Burst: limit(4)}}, ident("k"), 10, 4, "override"},
		{"zero disables", []sluice.Override{{Rule: "rpm", Attribute: "workspace", Value: "ws", Org: "o", Limit: limit(0)}}, ident("k"), 0, 0, ""},
		{"another org's workspace of the same name", []sluice.Override{{Rule: "rpm", Attribute: "workspace", Value: "ws", Org: "o2", Limit: limit(0)}}, ident("k"), 10, 0, "config"},
		{"raise above the rule", []sluice.Override{{Rule: "rpm", Attribute: "org", Value: "o", Limit: limit(1000)}}, ident("k"), 1000, 0, "override"},
		{"override of another rule", []sluice.Override{{Rule: "other", Attribute: "key", Value: "k", Limit: limit(1)}}, ident("k"), 10, 0, "config"},
		{"not yet expired", []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "k", Limit: limit(3), ExpiresAt: start.Add(time.Nanosecond)}}, ident("k"), 3, 0, "override"},
		{"expired", []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "k", Limit: limit(3), ExpiresAt: start}}, ident("k"), 10, 0, "config"},
		{"expired falls through to a wider one", []sluice.Override{
			{Rule: "rpm", Attribute: "key", Value: "k", Limit: limit(3), ExpiresAt: start},
			{Rule: "rpm", Attribute: "org", Value: "o", Limit: limit(7)},
		}, ident("k"), 7, 0, "override"},
		{"team and session", []sluice.Override{
			{Rule: "rpm", Attribute: "team", Value: "t", Limit: limit(5)},
			{Rule: "rpm", Attribute: "session", Value: "s", Limit: limit(6)},
		}, sluice.Identity{Key: "k", Team: "t", Session: "s"}, 6, 0, "override"},
		{"ip is the least specific", []sluice.Override{
			{Rule: "rpm", Attribute: "ip", Value: "10.0.0.1", Limit: limit(2)},
			{Rule: "rpm", Attribute: "org", Value: "o", Limit: limit(9)},
		}, sluice.Identity{Key: "k", Org: "o", IP: "10.0.0.1"}, 9, 0, "override"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rpm(10)
			r.Source = "config"
			other := rpm(10)
			other.Name, other.Match.Models = "other", []string{"m"}
			l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{r, other}, Overrides: tt.overrides})
			if tt.wantLimit == 0 {
				if applies(t, l, tt.id, "rpm") {
					t.Fatalf("rule applies, want it disabled: %+v", effective(t, l, tt.id, "rpm"))
				}
				if n := admitN(t, l, sluice.Request{Identity: tt.id}, 50); n != 50 {
					t.Fatalf("disabled rule refused after %d", n)
				}
				return
			}
			e := effective(t, l, tt.id, "rpm")
			if e.Limit != tt.wantLimit || e.Burst != tt.wantBurst || e.Source != tt.wantSource {
				t.Fatalf("effective limit %d burst %d source %q, want %d %d %q", e.Limit, e.Burst, e.Source, tt.wantLimit, tt.wantBurst, tt.wantSource)
			}
			capacity := tt.wantLimit
			if tt.wantBurst > 0 {
				capacity = tt.wantBurst
			}
			if n := admitN(t, l, sluice.Request{Identity: tt.id}, 2000); int64(n) != capacity {
				t.Fatalf("admitted %d, want %d", n, capacity)
			}
		})
	}
}

func TestOverride_MostSpecificAttributeWins(t *testing.T) {
	overrides := []sluice.Override{
		{Rule: "rpm", Attribute: "org", Value: "o", Limit: ptr[int64](5)},
		{Rule: "rpm", Attribute: "workspace", Value: "ws", Org: "o", Limit: ptr[int64](4)},
		{Rule: "rpm", Attribute: "user", Value: "u", Org: "o", Limit: ptr[int64](3)},
		{Rule: "rpm", Attribute: "key", Value: "k", Limit: ptr[int64](2)},
	}
	tests := []struct {
		name string
		id   sluice.Identity
		want int64
	}{
		{"key over user over workspace over org", sluice.Identity{Org: "o", Workspace: "ws", User: "u", Key: "k"}, 2},
		{"user over workspace over org", sluice.Identity{Org: "o", Workspace: "ws", User: "u", Key: "k2"}, 3},
		{"workspace over org", sluice.Identity{Org: "o", Workspace: "ws", User: "u2", Key: "k2"}, 4},
		{"org", sluice.Identity{Org: "o", Workspace: "ws2", User: "u2", Key: "k2"}, 5},
		{"none", sluice.Identity{Org: "o2", Workspace: "ws2", User: "u2", Key: "k2"}, 10},
		{"another org's workspace and user", sluice.Identity{Org: "o2", Workspace: "ws", User: "u", Key: "k2"}, 10},
	}
	// Declaration order must not matter: try it forwards and backwards.
	for _, reversed := range []bool{false, true} {
		list := append([]sluice.Override(nil), overrides...)
		if reversed {
			for i, j := 0, len(list)-1; i < j; i, j = i+1, j-1 {
				list[i], list[j] = list[j], list[i]
			}
		}
		l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{rpm(10)}, Overrides: list})
		for _, tt := range tests {
			if got := effective(t, l, tt.id, "rpm").Limit; got != tt.want {
				t.Errorf("%s (reversed %v): limit %d, want %d", tt.name, reversed, got, tt.want)
			}
		}
	}
}

func TestOverride_AppliesOnNextRequest(t *testing.T) {
	l, _ := withRules(t, rpm(2))
	admit(t, l, byKey("k"))
	admit(t, l, byKey("k"))
	refuse(t, l, byKey("k"), sluice.ErrRateLimited)

	// Disable the rule for k: the very next request is admitted.
	p := l.Policy()
	p.Overrides = []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "k", Limit: ptr[int64](0)}}
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	admit(t, l, byKey("k"))
	if n := admitN(t, l, byKey("other"), 10); n != 2 {
		t.Fatalf("another key admitted %d, want the rule's 2", n)
	}

	// Lower the limit for a key that used one of its two: the next
	// request is refused.
	admit(t, l, byKey("k3"))
	p.Overrides = append(p.Overrides, sluice.Override{Rule: "rpm", Attribute: "key", Value: "k3", Limit: ptr[int64](1)})
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	refuse(t, l, byKey("k3"), sluice.ErrRateLimited)
	if e := effective(t, l, ident("k3"), "rpm"); e.Limit != 1 || e.Source != "override" {
		t.Fatalf("effective %+v, want the override's 1", e)
	}
}

func TestOverride_ExpiresOnTheClock(t *testing.T) {
	expires := start.Add(time.Hour)
	l, clock := newLimiter(t, sluice.Options{
		Rules:     []sluice.Rule{daily(sluice.MetricRequests, 2)},
		Overrides: []sluice.Override{{Rule: "daily", Attribute: "workspace", Value: "ws", Org: "o", Limit: ptr[int64](5), ExpiresAt: expires}},
	})
	for range 4 {
		admit(t, l, byKey("k"))
	}
	if e := effective(t, l, ident("k"), "daily"); e.Limit != 5 || e.Source != "override" || e.Remaining != 1 {
		t.Fatalf("before expiry: %+v", e)
	}
	clock.Set(expires.Add(-time.Nanosecond))
	admit(t, l, byKey("k"))
	clock.Set(expires)
	// The rule's own limit of 2 is back, and 5 are already used.
	e := effective(t, l, ident("k"), "daily")
	if e.Limit != 2 || e.Source != "" || e.Used != 5 || e.Remaining != 0 {
		t.Fatalf("at expiry: %+v", e)
	}
	refuse(t, l, byKey("k"), sluice.ErrBudgetExhausted)
}

func TestOverride_EnablesARuleWithLimitZero(t *testing.T) {
	r := rpm(0)
	l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{r},
		Overrides: []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "abuser", Limit: ptr[int64](1)}}})
	admit(t, l, byKey("abuser"))
	refuse(t, l, byKey("abuser"), sluice.ErrRateLimited)
	if n := admitN(t, l, byKey("k"), 20); n != 20 {
		t.Fatalf("others refused after %d under a disabled rule", n)
	}
}

func TestTier_ScalesLimits(t *testing.T) {
	tiers := []sluice.Tier{{Name: "new", Percent: 50}, {Name: "pro", Percent: 300}, {Name: "same", Percent: 100}, {Name: "tiny", Percent: 1}}
	tests := []struct {
		tier       string
		wantLimit  int64
		wantSource string
	}{
		{"new", 5, "tier"},
		{"pro", 30, "tier"},
		{"same", 10, "config"},
		{"tiny", 1, "tier"}, // 10% of 10 rounds to 0, kept at 1
		{"unknown", 10, "config"},
		{"", 10, "config"},
	}
	for _, tt := range tests {
		t.Run(tt.tier, func(t *testing.T) {
			r := rpm(10)
			r.Source = "config"
			l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{r}, Tiers: tiers})
			req := byKey("k")
			req.Identity.Tier = tt.tier
			e := effective(t, l, req.Identity, "rpm")
			if e.Limit != tt.wantLimit || e.Source != tt.wantSource {
				t.Fatalf("limit %d source %q, want %d %q", e.Limit, e.Source, tt.wantLimit, tt.wantSource)
			}
			if n := admitN(t, l, req, 100); int64(n) != tt.wantLimit {
				t.Fatalf("admitted %d, want %d", n, tt.wantLimit)
			}
		})
	}
}

func TestTier_ScalesBurstAndBudget(t *testing.T) {
	r := tpm(1000)
	r.Burst = 400
	l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{r, daily(sluice.MetricTokens, 1_000_000)}, Tiers: []sluice.Tier{{Name: "new", Percent: 25}}})
	id := ident("k")
	id.Tier = "new"
	if e := effective(t, l, id, "tpm"); e.Limit != 250 || e.Burst != 100 || e.Remaining != 100 {
		t.Fatalf("scaled bucket %+v, want limit 250 burst 100", e)
	}
	if e := effective(t, l, id, "daily"); e.Limit != 250_000 {
		t.Fatalf("scaled budget %+v, want 250000", e)
	}
	req := sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 101}}
	if _, err := l.Admit(context.Background(), req); err == nil {
		t.Fatal("101 tokens admitted into a bucket of 100")
	}
}

func TestTier_OverrideBeatsTier(t *testing.T) {
	l, _ := newLimiter(t, sluice.Options{
		Rules:     []sluice.Rule{rpm(10)},
		Tiers:     []sluice.Tier{{Name: "new", Percent: 50}},
		Overrides: []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "vip", Limit: ptr[int64](8)}},
	})
	req := byKey("vip")
	req.Identity.Tier = "new"
	if e := effective(t, l, req.Identity, "rpm"); e.Limit != 8 || e.Source != "override" {
		t.Fatalf("override under a tier: %+v, want the override's 8", e)
	}
	if n := admitN(t, l, req, 100); n != 8 {
		t.Fatalf("admitted %d, want 8", n)
	}
	other := byKey("k")
	other.Identity.Tier = "new"
	if n := admitN(t, l, other, 100); n != 5 {
		t.Fatalf("tier admitted %d, want 5", n)
	}
}

// Effective answers "what applies to this subject and how much room is
// left", for the admin API: it must not refuse like an admission. A fixed
// reservation of 8000 under a tier that scales the budget to 5000 can never
// be admitted, but its headroom is still there to report.
func TestLimiter_EffectiveWithReservationLargerThanScaledLimit(t *testing.T) {
	b := daily(sluice.MetricTokens, 10_000)
	b.Reserve, b.ReserveAmount = sluice.ReserveFixed, 8000
	l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{b}, Tiers: []sluice.Tier{{Name: "new", Percent: 50}}})
	id := ident("k")
	id.Tier = "new"
	all, err := l.Effective(context.Background(), id)
	if err != nil || len(all) != 1 || all[0].Limit != 5000 || all[0].Remaining != 5000 {
		t.Fatalf("Effective = %+v, %v; want the budget of 5000 with 5000 left", all, err)
	}
}

// MaxInt64 is a common way to write "unlimited". A tier above 100% must
// keep such a limit huge, not wrap it: scale(MaxInt64, 200) overflows to a
// negative product and comes back as a limit of 1.
func TestTier_ScalingAHugeLimitSaturates(t *testing.T) {
	l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{daily(sluice.MetricTokens, math.MaxInt64)},
		Tiers: []sluice.Tier{{Name: "pro", Percent: 200}}})
	id := ident("k")
	id.Tier = "pro"
	if e := effective(t, l, id, "daily"); e.Limit != math.MaxInt64 {
		t.Fatalf("200%% of MaxInt64 is %d, want MaxInt64", e.Limit)
	}
	req := tokens("k", 1000, 1000)
	req.Identity.Tier = "pro"
	admit(t, l, req)
}

// Raising a limit keeps the usage counted (rule.go: the counter's identity
// leaves out the limit for that reason). A key that used 2 of 2 this minute
// and is raised to 3 has one request left now. The token bucket keeps its
// debt in nanoseconds of refill instead, which at the new rate is 3 units:
// the raise gives nothing for 20 seconds, and a lowered limit gives room
// back early.
func TestOverride_RaisedRateLimitKeepsUnitsUsed(t *testing.T) {
	l, _ := withRules(t, rpm(2))
	admit(t, l, byKey("k"))
	admit(t, l, byKey("k"))
	p := l.Policy()
	p.Overrides = []sluice.Override{{Rule: "rpm", Attribute: "key", Value: "k", Limit: ptr[int64](3)}}
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if e := effective(t, l, ident("k"), "rpm"); e.Used != 2 || e.Remaining != 1 {
		t.Fatalf("after raising 2 to 3 with 2 used: used %d remaining %d, want 2 and 1", e.Used, e.Remaining)
	}
	admit(t, l, byKey("k"))
}

// A rule matched to other models counts from zero, as after a change of its
// window; the order its models are listed in is not a change.
func TestPolicy_ChangingAModelMatchResetsTheCounters(t *testing.T) {
	rule := daily(sluice.MetricRequests, 10)
	rule.Match.Models = []string{"a", "b"}
	l, _ := withRules(t, rule)
	req := byKey("k")
	req.Identity.Model = "a"
	admitN(t, l, req, 3)
	used := func() int64 { return effective(t, l, req.Identity, "daily").Used }
	if got := used(); got != 3 {
		t.Fatalf("used %d, want 3", got)
	}
	set := func(models ...string) {
		t.Helper()
		r := rule
		r.Match.Models = models
		if err := l.SetPolicy(sluice.Policy{Rules: []sluice.Rule{r}}); err != nil {
			t.Fatal(err)
		}
	}
	set("b", "a", "a")
	if got := used(); got != 3 {
		t.Fatalf("models reordered: used %d, want the same 3", got)
	}
	set("a", "b", "c")
	if got := used(); got != 0 {
		t.Fatalf("a model added to the match: used %d, want 0", got)
	}
	set("a", "b")
	if got := used(); got != 3 {
		t.Fatalf("the match restored: used %d, want the first counter's 3", got)
	}
}
