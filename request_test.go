package sluice_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestPrice_Cost(t *testing.T) {
	// Micro-dollars per million tokens: $3 input, $0.30 cached, $3.75 cache
	// write, $15 output.
	sonnet := sluice.Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, Output: 15_000_000}
	tests := []struct {
		name  string
		price sluice.Price
		usage sluice.Usage
		want  int64
	}{
		{"nothing", sonnet, sluice.Usage{}, 0},
		{"free model", sluice.Price{}, sluice.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}, 0},
		{"plain input", sonnet, sluice.Usage{InputTokens: 1000}, 3000},
		{"output", sonnet, sluice.Usage{OutputTokens: 200}, 3000},
		{"cached input priced apart", sonnet, sluice.Usage{InputTokens: 1000, CachedInputTokens: 1000}, 300},
		{"cache write priced apart", sonnet, sluice.Usage{InputTokens: 1000, CacheWriteTokens: 1000}, 3750},
		{"all four", sonnet, sluice.Usage{InputTokens: 1000, CachedInputTokens: 400, CacheWriteTokens: 100, OutputTokens: 200},
			500*3 + 400*3/10 + 100*375/100 + 200*15},
		{"cached beyond input is not negative plain input", sonnet, sluice.Usage{InputTokens: 100, CachedInputTokens: 300}, 90},
		{"cost is not a custom metric", sonnet, sluice.Usage{Cost: 99, Custom: map[string]int64{"audio_seconds": 9}}, 0},
		{"rounds one token up to a micro-dollar", sluice.Price{Input: 1}, sluice.Usage{InputTokens: 1}, 1},
		{"a million at one is exactly one", sluice.Price{Input: 1}, sluice.Usage{InputTokens: 1_000_000}, 1},
		{"a million and one rounds up", sluice.Price{Input: 1}, sluice.Usage{InputTokens: 1_000_001}, 2},
		{"fractions add before rounding", sluice.Price{Input: 500_000, Output: 500_000}, sluice.Usage{InputTokens: 1, OutputTokens: 1}, 1},
		{"1.5 micro-dollars a token", sluice.Price{Input: 1_500_000}, sluice.Usage{InputTokens: 3}, 5},
		{"negative prices are free", sluice.Price{Input: -3_000_000}, sluice.Usage{InputTokens: 1000}, 0},
		{"largest exact", sluice.Price{Output: 1_000_000}, sluice.Usage{OutputTokens: math.MaxInt64}, math.MaxInt64},
		{"saturates past int64", sluice.Price{Output: 2_000_000}, sluice.Usage{OutputTokens: math.MaxInt64}, math.MaxInt64},
		{"saturates on a huge product", sluice.Price{Input: math.MaxInt64, Output: math.MaxInt64}, sluice.Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, math.MaxInt64},
		{"saturates summing four large parts", sluice.Price{Input: 1 << 40, CachedInput: 1 << 40, CacheWrite: 1 << 40, Output: 1 << 40},
			sluice.Usage{InputTokens: 1 << 62, CachedInputTokens: 1 << 60, CacheWriteTokens: 1 << 60, OutputTokens: 1 << 62}, math.MaxInt64},
		{"large but exact", sluice.Price{Output: 15_000_000}, sluice.Usage{OutputTokens: 1 << 40}, 15 << 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.price.Cost(tt.usage); got != tt.want {
				t.Fatalf("Cost(%+v) = %d, want %d", tt.usage, got, tt.want)
			}
		})
	}
}

func TestUsage_IsZero(t *testing.T) {
	if u := (sluice.Usage{}); !u.IsZero() {
		t.Fatal("zero Usage is not zero")
	}
	for _, u := range []sluice.Usage{{InputTokens: 1}, {OutputTokens: 1}, {CachedInputTokens: 1}, {CacheWriteTokens: 1}, {Cost: 1},
		{Custom: map[string]int64{"x": 0}}} {
		if u.IsZero() {
			t.Errorf("%+v is zero", u)
		}
	}
}

// Settlement charges each metric from its field of Usage, custom metrics
// included.
func TestReservation_SettleChargesEachMetric(t *testing.T) {
	rules := []sluice.Rule{
		named(daily(sluice.MetricInputTokens, 1_000_000), "in"),
		named(daily(sluice.MetricOutputTokens, 1_000_000), "out"),
		named(daily(sluice.MetricTokens, 1_000_000), "tokens"),
		named(daily(sluice.MetricCost, 1_000_000), "cost"),
		named(daily(sluice.MetricRequests, 1_000_000), "requests"),
		named(daily("audio_seconds", 1_000_000), "audio"),
	}
	l, _ := withRules(t, rules...)
	req := tokens("k", 100, 200)
	req.Max.Cost = 5000
	req.Max.Custom = map[string]int64{"audio_seconds": 60}
	r := admit(t, l, req)
	want := map[string]int64{"in": 100, "out": 200, "tokens": 300, "cost": 5000, "requests": 1, "audio": 60}
	for name, w := range want {
		if got := effective(t, l, ident("k"), name).Used; got != w {
			t.Errorf("%s reserved %d, want %d", name, got, w)
		}
	}
	settle(t, r, sluice.Usage{InputTokens: 90, CachedInputTokens: 50, OutputTokens: 10, Cost: 700, Custom: map[string]int64{"audio_seconds": 42}})
	want = map[string]int64{"in": 90, "out": 10, "tokens": 100, "cost": 700, "requests": 1, "audio": 42}
	for name, w := range want {
		if got := effective(t, l, ident("k"), name).Used; got != w {
			t.Errorf("%s settled at %d, want %d", name, got, w)
		}
	}
}

func TestLimiter_RetryAfterRoundsUp(t *testing.T) {
	tests := []struct {
		name   string
		limit  int64
		window time.Duration
		want   time.Duration
	}{
		{"a third of a second is 334ms", 3, time.Second, 334 * time.Millisecond},
		{"a seventh of a second is 143ms", 7, time.Second, 143 * time.Millisecond},
		{"a quarter second is exact", 4, time.Second, 250 * time.Millisecond},
		{"a nanosecond is a millisecond", 1_000_000_000, time.Second, time.Millisecond},
		{"a minute is exact", 1, time.Minute, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clock := withRules(t, sluice.Rule{Name: "r", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: tt.limit, Window: tt.window})
			admit(t, l, tokens("k", tt.limit, 0))
			err := refuse(t, l, tokens("k", 1, 0), sluice.ErrRateLimited)
			var rl *sluice.RateLimitError
			if !errors.As(err, &rl) || rl.RetryAfter != tt.want {
				t.Fatalf("RetryAfter %v, want %v", rl.RetryAfter, tt.want)
			}
			// Retrying after RetryAfter always succeeds; the hint is
			// never early.
			clock.Advance(rl.RetryAfter)
			admit(t, l, tokens("k", 1, 0))
		})
	}
}

func TestLimiter_BusyRetryAfterIsCapped(t *testing.T) {
	tests := []struct {
		name string
		cap  time.Duration
		want time.Duration
	}{
		{"default cap of a second", 0, time.Second},
		{"lease expiry when sooner", time.Hour, 90 * time.Second},
		{"set cap", 250 * time.Millisecond, 250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{inFlight(1)}, BusyRetryAfter: tt.cap})
			admit(t, l, byKey("k"))
			var busy *sluice.BusyError
			if err := refuse(t, l, byKey("k"), sluice.ErrBusy); !errors.As(err, &busy) || busy.RetryAfter != tt.want {
				t.Fatalf("busy %v, want retry after %v", err, tt.want)
			}
		})
	}
}

func TestLimiter_ReservationDeadline(t *testing.T) {
	l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{inFlight(5)}, DefaultTimeout: 2 * time.Minute, ExpirySlack: 10 * time.Second})
	if got := admit(t, l, byKey("k")).Deadline(); !got.Equal(start.Add(130 * time.Second)) {
		t.Fatalf("default deadline %v", got)
	}
	req := byKey("k")
	req.Timeout = 5 * time.Second
	r := admit(t, l, req)
	if !r.Deadline().Equal(start.Add(15 * time.Second)) {
		t.Fatalf("deadline %v, want timeout plus slack", r.Deadline())
	}
	if r.ID() == admit(t, l, req).ID() {
		t.Fatal("two reservations share an ID")
	}
	if _, err := l.Admit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// TestLimiter_SessionRulesApplyOnlyInSessions: a rule counted per session
// leaves calls made outside any session alone (they do not share one
// counter), as a tag rule leaves untagged calls alone; composites too.
func TestLimiter_SessionRulesApplyOnlyInSessions(t *testing.T) {
	ctx := context.Background()
	l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{
		{Name: "per_session", Kind: sluice.KindRate, Subject: "session", Limit: 1, Window: time.Hour},
		{Name: "per_user_session", Kind: sluice.KindRate, Subject: "user+session", Limit: 1, Window: time.Hour},
	}})
	for i := range 3 {
		res, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{User: "ada"}})
		if err != nil {
			t.Fatalf("call %d outside sessions: %v", i, err)
		}
		if n := len(res.Result().Warnings); res.Result().Rule != "" || n != 0 {
			t.Fatalf("call outside sessions charged %+v", res.Result())
		}
		_ = res.Release(ctx)
	}
	in := sluice.Request{Identity: sluice.Identity{User: "ada", Session: "s1"}}
	if _, err := l.Admit(ctx, in); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(ctx, in); !errors.Is(err, sluice.ErrRateLimited) {
		t.Fatalf("second call in the session: %v", err)
	}
	in.Identity.Session = "s2"
	if _, err := l.Admit(ctx, in); err != nil {
		t.Fatalf("another session: %v", err)
	}
}
