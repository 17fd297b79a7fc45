package sluice_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestSimple_Rules(t *testing.T) {
	rpmRule := sluice.Rule{Name: "simple_rpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricRequests, Limit: 60, Window: time.Minute, Source: "simple"}
	tpmRule := sluice.Rule{Name: "simple_tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: 90_000, Window: time.Minute, Source: "simple"}
	concRule := sluice.Rule{Name: "simple_concurrency", Kind: sluice.KindConcurrency, Subject: "key", Limit: 4, Source: "simple"}
	onUser := func(r sluice.Rule) sluice.Rule { r.Subject = "workspace+user"; return r }
	tests := []struct {
		name   string
		simple sluice.Simple
		want   []sluice.Rule
	}{
		{"zero limits nothing", sluice.Simple{}, nil},
		{"negative limits nothing", sluice.Simple{RequestsPerMinute: -1, TokensPerMinute: -1, Concurrency: -1}, nil},
		{"all three", sluice.Simple{RequestsPerMinute: 60, TokensPerMinute: 90_000, Concurrency: 4}, []sluice.Rule{rpmRule, tpmRule, concRule}},
		{"tokens only", sluice.Simple{TokensPerMinute: 90_000}, []sluice.Rule{tpmRule}},
		{"another subject", sluice.Simple{RequestsPerMinute: 60, Concurrency: 4, Subject: "workspace+user"}, []sluice.Rule{onUser(rpmRule), onUser(concRule)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.simple.Rules()
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Rules() =\n%+v\nwant\n%+v", got, tt.want)
			}
			for _, r := range got {
				if err := r.Validate(); err != nil {
					t.Fatalf("rule %s is invalid: %v", r.Name, err)
				}
			}
		})
	}
}

func TestLimiter_SimpleCheckedWithRules(t *testing.T) {
	budget := daily(sluice.MetricTokens, 500)
	l, clock := newLimiter(t, sluice.Options{
		Simple: sluice.Simple{RequestsPerMinute: 3, TokensPerMinute: 1000, Concurrency: 2},
		Rules:  []sluice.Rule{budget},
	})
	ctx := context.Background()
	names := map[string]bool{}
	all, err := l.Effective(ctx, ident("k"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		names[e.Rule] = true
	}
	if len(all) != 4 || !names["simple_rpm"] || !names["simple_tpm"] || !names["simple_concurrency"] || !names["daily"] {
		t.Fatalf("effective rules %+v, want the three simple limits and the budget", all)
	}

	first, err := l.AdmitKey(ctx, "k", 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AdmitKey(ctx, "k", 100); err != nil {
		t.Fatal(err)
	}
	// Concurrency 2: the third is busy.
	if _, err := l.AdmitKey(ctx, "k", 100); !errors.Is(err, sluice.ErrBusy) {
		t.Fatalf("third call in flight: %v, want busy", err)
	}
	if err := first.Settle(ctx, sluice.Usage{InputTokens: 40, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	// The budget is checked in the same step: 150 used, 400 more do not
	// fit, and the refusal charges none of the simple limits.
	if _, err := l.AdmitKey(ctx, "k", 400); !errors.Is(err, sluice.ErrBudgetExhausted) {
		t.Fatalf("call over the budget: %v, want budget exhausted", err)
	}
	if e := effective(t, l, ident("k"), "simple_rpm"); e.Used != 2 {
		t.Fatalf("simple_rpm used %d after a budget refusal, want 2", e.Used)
	}
	if e := effective(t, l, ident("k"), "simple_tpm"); e.Used != 150 {
		t.Fatalf("simple_tpm used %d, want 100 reserved plus 50 settled", e.Used)
	}
	if e := effective(t, l, ident("k"), "simple_concurrency"); e.Used != 1 {
		t.Fatalf("simple_concurrency used %d, want 1", e.Used)
	}
	// A third request this minute is admitted, a fourth is rate limited.
	third, err := l.AdmitKey(ctx, "k", 10)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, third, sluice.Usage{InputTokens: 10})
	if _, err := l.AdmitKey(ctx, "k", 10); !errors.Is(err, sluice.ErrRateLimited) {
		t.Fatalf("fourth request in a minute: %v, want rate limited", err)
	}
	// More tokens than a minute holds can never fit.
	var tl *sluice.TooLargeError
	if _, err := l.AdmitKey(ctx, "other", 1001); !errors.As(err, &tl) || tl.Rule != "simple_tpm" {
		t.Fatalf("1001 tokens: %v, want too large for simple_tpm", err)
	}
	// Keys are separate subjects; the budget is the workspace's.
	clock.Advance(time.Minute)
	if _, err := l.AdmitKey(ctx, "other", 500); !errors.Is(err, sluice.ErrBudgetExhausted) {
		t.Fatalf("another key over the shared budget: %v", err)
	}
	if _, err := l.AdmitKey(ctx, "other", 10); err != nil {
		t.Fatalf("another key: %v", err)
	}
}

func TestLimiter_AdmitKeyChargesTokensAsInput(t *testing.T) {
	l, _ := newLimiter(t, sluice.Options{Simple: sluice.Simple{TokensPerMinute: 1000}})
	r, err := l.AdmitKey(context.Background(), "k", 250)
	if err != nil {
		t.Fatal(err)
	}
	if e := effective(t, l, sluice.Identity{Key: "k"}, "simple_tpm"); e.Used != 250 || e.Remaining != 750 {
		t.Fatalf("after AdmitKey(250): %+v", e)
	}
	settle(t, r, sluice.Usage{InputTokens: 50, OutputTokens: 50})
	if e := effective(t, l, sluice.Identity{Key: "k"}, "simple_tpm"); e.Used != 100 {
		t.Fatalf("after settling 100: used %d", e.Used)
	}
	if _, err := l.AdmitKey(context.Background(), "k", -1); !errors.Is(err, sluice.ErrInvalidUsage) {
		t.Fatalf("AdmitKey(-1): %v, want ErrInvalidUsage", err)
	}
}
