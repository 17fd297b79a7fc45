package sluicehttp_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicehttp"
)

// TestRefusal_EveryRefusalCarriesRateLimitFields: rate, busy, budget
// and never-fits refusals all carry X-RateLimit-*, the IETF RateLimit and
// RateLimit-Policy fields (with the unit and window of draft-11) and
// OpenAI's x-ratelimit-*-requests and -tokens.
func TestRefusal_EveryRefusalCarriesRateLimitFields(t *testing.T) {
	monthlyCost := sluice.Rule{Name: "spend", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricCost, Limit: 1_000_000, Period: sluice.PeriodMonth}
	tests := []struct {
		name   string
		rules  []sluice.Rule
		before sluice.Request // admitted first, unless zero
		req    sluice.Request
		status int
		want   map[string]string
	}{
		{"rate", []sluice.Rule{rpm(1), tpm(1000)}, tokens("k", 10, 10), tokens("k", 10, 10), 429, map[string]string{
			"RateLimit-Policy": `"rpm";q=1;w=60`, "RateLimit": `"rpm";r=0;t=60`, "X-RateLimit-Limit": "1",
			"x-ratelimit-limit-requests": "1", "x-ratelimit-remaining-requests": "0", "x-ratelimit-limit-tokens": "1000",
		}},
		{"busy", []sluice.Rule{inFlight(1)}, byKey("k"), byKey("k"), 429, map[string]string{
			"RateLimit-Policy": `"inflight";q=1;qu="concurrent-requests"`, "X-RateLimit-Remaining": "0",
		}},
		{"budget", []sluice.Rule{daily(sluice.MetricTokens, 1000), rpm(10)}, tokens("k", 500, 450), tokens("k", 10, 100), 429, map[string]string{
			"RateLimit-Policy": `"daily";q=1000;qu="tokens";w=86400`, "RateLimit": `"daily";r=50;t=50400`,
			"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "50", "x-ratelimit-limit-requests": "10",
		}},
		{"cost per month", []sluice.Rule{monthlyCost}, sluice.Request{Identity: ident("k"), Max: sluice.Usage{Cost: 999_999}},
			sluice.Request{Identity: ident("k"), Max: sluice.Usage{Cost: 2}}, 429, map[string]string{
				// March 2026 has 31 days.
				"RateLimit-Policy": `"spend";q=1000000;qu="micro-dollars";w=2678400`,
			}},
		// The deciding rule has more room than another; the fields
		// describe it all the same, the rule the body names (issue 31).
		{"never fits", []sluice.Rule{daily(sluice.MetricTokens, 1000), rpm(2)}, byKey("k"), tokens("k", 100, 5000), 413, map[string]string{
			"RateLimit-Policy": `"daily";q=1000;qu="tokens";w=86400`, "X-RateLimit-Remaining": "1000", "X-RateLimit-Limit": "1000",
			"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "1",
			"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "1000",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clock := withRules(t, tt.rules...)
			admit(t, l, tt.before)
			_, err := l.Admit(context.Background(), tt.req)
			hr, ok := sluicehttp.RefusalOf(err)
			if !ok || hr.Status != tt.status {
				t.Fatalf("Admit: %v, status %d, want %d", err, hr.Status, tt.status)
			}
			h := http.Header{}
			hr.SetHeaders(h, clock.Now())
			for k, v := range tt.want {
				if got := h.Get(k); got != v {
					t.Errorf("%s %q, want %q", k, got, v)
				}
			}
			for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"} {
				if h.Get(k) == "" {
					t.Errorf("%s missing: %v", k, h)
				}
			}
		})
	}
}

// TestSetHeaders_PolicyUnitAndWindow: an admission's fields name the unit and
// window of the rule with the least room.
func TestSetHeaders_PolicyUnitAndWindow(t *testing.T) {
	l, clock := withRules(t, tpm(1000), rpm(100))
	res := admit(t, l, tokens("k", 400, 100))
	h := http.Header{}
	sluicehttp.SetHeaders(h, res.Result(), clock.Now())
	if got, want := h.Get("RateLimit-Policy"), `"tpm";q=1000;qu="tokens";w=60`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
}

// discardHeaders is a HeaderSetter that keeps nothing; discardBytes one
// that also takes values as bytes, as the gateway's does.
type discardHeaders struct{}

func (discardHeaders) Set(name, value string) {}
func (discardHeaders) Add(name, value string) {}

type discardBytes struct{ discardHeaders }

func (discardBytes) SetBytes(name string, value []byte) {}

// Every admitted answer carries these headers, so what they allocate is
// paid on each: the buffer the values are built in, then one string per
// value for a setter of strings, and for one that takes bytes only the two
// resets that are durations.
func TestSetHeaders_AllocatesOneStringPerValue(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tokens := sluice.Headroom{Rule: "per-key-tokens", Kind: sluice.KindRate, Metric: sluice.MetricTokens, Limit: 1_000_000, Remaining: 987_654, ResetAt: now.Add(37 * time.Second), Window: time.Minute}
	r := sluice.Result{Headroom: tokens,
		Requests: sluice.Headroom{Rule: "per-key-requests", Kind: sluice.KindRate, Metric: sluice.MetricRequests, Limit: 600, Remaining: 597, ResetAt: now.Add(300 * time.Millisecond), Window: time.Minute},
		Tokens:   tokens}
	// X-RateLimit-Limit, -Remaining, -Reset, RateLimit-Policy, RateLimit,
	// and x-ratelimit-{limit,remaining,reset}-{requests,tokens}.
	for _, tc := range []struct {
		name string
		h    sluicehttp.HeaderSetter
		want float64
	}{{"strings", discardHeaders{}, 1 + 11}, {"bytes", discardBytes{}, 1 + 2}} {
		if got := testing.AllocsPerRun(100, func() { sluicehttp.SetHeaders(tc.h, r, now) }); got > tc.want {
			t.Errorf("SetHeaders on a setter of %s allocates %v times, want at most %v", tc.name, got, tc.want)
		}
	}
}
