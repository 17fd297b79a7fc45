package gateway

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/valyala/fasthttp"
)

func TestPacer_TokensAndRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var h fasthttp.ResponseHeader
	// OpenAI: 1,000 tokens, 100 left, full again in 900 ms: one token per
	// millisecond.
	h.Set("x-ratelimit-limit-tokens", "1000")
	h.Set("x-ratelimit-remaining-tokens", "100")
	h.Set("x-ratelimit-reset-tokens", "900ms")
	var p pacer
	p.observe(now, &h, 200)
	if d := p.take(now, 10, 100); d != 0 {
		t.Fatalf("100 of 100 tokens: wait %v", d)
	}
	if d := p.take(now, 10, 50); d < 50*time.Millisecond || d > 52*time.Millisecond {
		t.Fatalf("50 more tokens with none left: wait %v, want about 50ms", d)
	}
	if d := p.take(now.Add(51*time.Millisecond), 10, 50); d != 0 {
		t.Fatalf("after the refill: wait %v", d)
	}
	// A call larger than the whole bucket is the provider's to refuse.
	if d := p.take(now.Add(51*time.Millisecond), 10, 5000); d != 0 {
		t.Fatalf("larger than the bucket: wait %v", d)
	}

	// Anthropic with only an input-tokens limit: the input counts.
	var a fasthttp.ResponseHeader
	a.Set("anthropic-ratelimit-input-tokens-limit", "100")
	a.Set("anthropic-ratelimit-input-tokens-remaining", "20")
	a.Set("anthropic-ratelimit-input-tokens-reset", now.Add(8*time.Second).Format(time.RFC3339))
	var q pacer
	q.observe(now, &a, 200)
	if d := q.take(now, 20, 4000); d != 0 {
		t.Fatalf("20 input tokens of 20 (the output does not count): wait %v", d)
	}
	if d := q.take(now, 10, 10); d < time.Second || d > 1100*time.Millisecond {
		t.Fatalf("10 input tokens with none left, 10 per second: wait %v", d)
	}

	// A 429's retry-after holds everything.
	var r fasthttp.ResponseHeader
	r.Set("retry-after-ms", "1500")
	var x pacer
	x.observe(now, &r, 429)
	if d := x.take(now.Add(500*time.Millisecond), 1, 1); d != time.Second {
		t.Fatalf("after a 429 with retry-after-ms 1500: wait %v", d)
	}
	if d := x.take(now.Add(1500*time.Millisecond), 1, 1); d != 0 {
		t.Fatalf("after the retry-after: wait %v", d)
	}
}

// TestPacer_Limits: what a pacer learned is what the rules from the
// provider take: requests and combined tokens from OpenAI's headers, input
// tokens from Anthropic's input-token limit given alone, and a 429's hold.
func TestPacer_Limits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var p pacer
	if got := p.limits(); got != (sluice.ProviderLimits{}) {
		t.Fatalf("before any answer: %+v", got)
	}
	var h fasthttp.ResponseHeader
	h.Set("x-ratelimit-limit-requests", "500")
	h.Set("x-ratelimit-remaining-requests", "499")
	h.Set("x-ratelimit-limit-tokens", "30000")
	h.Set("x-ratelimit-remaining-tokens", "29000")
	p.observe(now, &h, 200)
	if got, want := p.limits(), (sluice.ProviderLimits{Requests: 500, Tokens: 30000}); got != want {
		t.Fatalf("OpenAI: %+v, want %+v", got, want)
	}
	var a fasthttp.ResponseHeader
	a.Set("anthropic-ratelimit-input-tokens-limit", "40000")
	a.Set("anthropic-ratelimit-input-tokens-remaining", "0")
	a.Set("retry-after-ms", "1500")
	p.observe(now, &a, 429)
	want := sluice.ProviderLimits{Requests: 500, InputTokens: 40000, HeldUntil: now.Add(1500 * time.Millisecond)}
	if got := p.limits(); got != want {
		t.Fatalf("Anthropic's input tokens and a 429: %+v, want %+v", got, want)
	}
}
