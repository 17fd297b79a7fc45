package gateway

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/valyala/fasthttp"
)

// namesSet records the names a HeaderSetter is given.
type namesSet struct{ set, added []string }

func (n *namesSet) Set(name, _ string) { n.set = append(n.set, name) }
func (n *namesSet) Add(name, _ string) { n.added = append(n.added, name) }

// everyHeader writes every header the library writes, on an admission and
// on a refusal, through h.
func everyHeader(h sluicehttp.HeaderSetter, now time.Time) {
	room := sluice.Headroom{Rule: "tokens", Kind: sluice.KindBudget, Metric: sluice.MetricTokens, Limit: 1000, Remaining: 10, ResetAt: now.Add(time.Hour), Window: 24 * time.Hour}
	requests := sluice.Headroom{Rule: "rpm", Kind: sluice.KindRate, Metric: sluice.MetricRequests, Limit: 60, Remaining: 59, ResetAt: now.Add(time.Second), Window: time.Minute}
	r := sluice.Result{Headroom: room, Requests: requests, Tokens: room,
		Warnings: []sluice.Warning{{Rule: "tokens", Used: 990, Limit: 1000, Threshold: 0.9}}}
	sluicehttp.SetHeaders(h, r, now)
	refusal, _ := sluicehttp.RefusalOf(&sluice.BudgetError{Refusal: sluice.Refusal{Rule: "tokens", Kind: sluice.KindBudget, Metric: sluice.MetricTokens,
		Limit: 1000, Used: 1000, Period: sluice.PeriodDay, ResetAt: now.Add(time.Hour), Result: &r}})
	refusal.SetHeaders(h, now)
	wait := sluicehttp.Refusal{RetryAfter: 1500 * time.Millisecond, Terminal: true}
	wait.SetHeaders(h, now)
}

// Every name the library sets on an answer is one canonicalHeaders knows,
// so none is normalized per request.
func TestCanonicalHeaders_KnowsTheLibrarysNames(t *testing.T) {
	t.Parallel()
	var n namesSet
	everyHeader(&n, time.Unix(1_800_000_000, 0))
	for _, name := range n.set {
		if _, ok := canonicalNames[name]; !ok {
			t.Errorf("the library sets %q, which canonicalNames does not hold", name)
		}
	}
	if !slices.Contains(n.set, "X-Should-Retry") || !slices.Contains(n.set, "x-ratelimit-reset-tokens") {
		t.Fatalf("names set %v: the refusal's and the admission's are not all there", n.set)
	}
}

// Written through canonicalHeaders, an answer's header is byte for byte
// the one fasthttp's own Set and Add write.
func TestCanonicalHeaders_SameBytesAsSet(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	var direct, canonical fasthttp.ResponseHeader
	everyHeader(&direct, now)
	everyHeader(canonicalHeaders{&canonical}, now)
	for _, h := range []sluicehttp.HeaderSetter{&direct, canonicalHeaders{&canonical}} {
		h.Set(HeaderRequestID, "req_1")
		h.Set(headerModel, "mock-small")
		h.Set(HeaderCostMicros, "12")
		h.Set("X-Sluice-Fail-Open", "true") // one it does not hold
	}
	if got, want := string(canonical.Header()), string(direct.Header()); got != want {
		t.Fatalf("through canonicalHeaders:\n%s\nwith Set:\n%s", got, want)
	}
	if v := string(canonical.Peek("X-Ratelimit-Limit-Requests")); v != "60" {
		t.Fatalf("X-Ratelimit-Limit-Requests = %q, want 60", v)
	}
}

// BenchmarkCanonicalHeaders writes an admission's headers through
// canonicalHeaders, and through fasthttp's own Set (the peer).
func BenchmarkCanonicalHeaders(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	room := sluice.Headroom{Rule: "daily_token_budget", Kind: sluice.KindBudget, Metric: sluice.MetricTokens, Limit: 100_000_000_000_000, Remaining: 99_999_999_990_000, ResetAt: now.Add(time.Hour), Window: 24 * time.Hour}
	requests := sluice.Headroom{Rule: "rate_per_minute", Kind: sluice.KindRate, Metric: sluice.MetricRequests, Limit: 100_000_000, Remaining: 99_999_999, ResetAt: now.Add(time.Second), Window: time.Minute}
	r := sluice.Result{Headroom: requests, Requests: requests, Tokens: room}
	var h fasthttp.ResponseHeader
	for _, bc := range []struct {
		name string
		to   sluicehttp.HeaderSetter
	}{{"canonical", canonicalHeaders{&h}}, {"fasthttp", &h}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h.Reset()
				sluicehttp.SetHeaders(bc.to, r, now)
				bc.to.Set(HeaderRequestID, "req_0123456789abcdef")
				bc.to.Set(headerModel, "mock-small")
			}
		})
	}
}
