package gateway

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/valyala/fasthttp"
)

// pacer follows one upstream model's rate limits as the provider reports
// them in its answers' headers, and, on a provider with pace set, holds a
// call that the provider would refuse until it would not: a call held a
// few hundred milliseconds is better than one sent, refused 429 and
// retried. Providers count per model, so there is one pacer per provider
// and upstream model name, in each replica's memory (replicas learn the
// same limits from the same headers). What it learns also goes to the
// limiter, for the rules that take their limit from the provider
// (limit_from: provider), paced or not.
//
// Both providers refill their buckets continuously and give, beside the
// limit and what remains, the time at which the bucket is full again: the
// pacer refills at the rate those imply between answers, takes what each
// call it lets through will use, and starts again from the provider's
// figures at every answer.
type pacer struct {
	mu       sync.Mutex
	requests paceBucket
	tokens   paceBucket
	// tokensInput: the provider reported input tokens only (Anthropic's
	// input-tokens limit, when it sent no combined one).
	tokensInput bool
	// holdUntil is a provider 429's retry-after.
	holdUntil time.Time
}

// paceBucket is one of the provider's buckets as last reported.
type paceBucket struct {
	known bool
	limit int64   // 0 when not reported
	level float64 // what remains, at at
	at    time.Time
	rate  float64 // refill per nanosecond; 0: full at reset
	reset time.Time
}

// set starts the bucket again from the provider's figures.
func (b *paceBucket) set(now time.Time, limit, remaining int64, reset time.Time) {
	b.known, b.limit, b.level, b.at, b.reset, b.rate = true, limit, float64(remaining), now, reset, 0
	if d := reset.Sub(now); d > 0 && limit > remaining {
		b.rate = float64(limit-remaining) / float64(d)
	}
}

// levelAt is what remains at now.
func (b *paceBucket) levelAt(now time.Time) float64 {
	if !b.known {
		return math.Inf(1)
	}
	if !now.Before(b.reset) && b.limit > 0 {
		return float64(b.limit)
	}
	if !now.Before(b.reset) {
		return math.Inf(1) // past the reset, and no limit to refill to
	}
	l := b.level + b.rate*float64(now.Sub(b.at))
	if b.limit > 0 {
		l = min(l, float64(b.limit))
	}
	return l
}

// wait is how long until n fits, 0 when it does now.
func (b *paceBucket) wait(now time.Time, n int64) time.Duration {
	l := b.levelAt(now)
	if l >= float64(n) || b.limit > 0 && n > b.limit {
		// A call larger than the whole bucket is the provider's to refuse.
		return 0
	}
	if b.rate <= 0 {
		return b.reset.Sub(now)
	}
	return time.Duration((float64(n)-l)/b.rate) + time.Millisecond
}

func (b *paceBucket) take(now time.Time, n int64) {
	if !b.known {
		return
	}
	b.level, b.at = b.levelAt(now)-float64(n), now
}

// pacerFor returns the pacer of model on p, starting from p's configured
// limits when it has them.
func (p *provider) pacerFor(model string) *pacer {
	if pc, ok := p.pacers.Load(model); ok {
		return pc.(*pacer)
	}
	pc := &pacer{}
	pc.requests.configure(p.RequestsPerMinute)
	pc.tokens.configure(p.TokensPerMinute)
	stored, _ := p.pacers.LoadOrStore(model, pc)
	return stored.(*pacer)
}

// configure starts the bucket from a configured limit per minute: full,
// refilled continuously, until the provider reports its own figures.
func (b *paceBucket) configure(perMinute int64) {
	if perMinute <= 0 {
		return
	}
	b.known, b.limit, b.level, b.rate = true, perMinute, float64(perMinute), float64(perMinute)/float64(time.Minute)
	b.reset = time.Unix(1<<62, 0) // never: the rate refills it
}

// count counts a call sent at now without pacing it: configured limits
// are followed by what the gateway sends, since it is told nothing else.
func (p *pacer) count(now time.Time, input, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tokens := total
	if p.tokensInput {
		tokens = input
	}
	p.requests.take(now, 1)
	p.tokens.take(now, tokens)
}

// pace holds the call until pc lets it through, or refuses it when that
// would take longer than PaceMaxWait or pass the call's deadline.
func (c *call) pace(pc *pacer, cand *model, capPer int64) error {
	input := c.bound.InputTokens
	total := input + capPer*max(c.bound.N, 1)
	var held time.Duration
	for {
		now := c.g.now()
		d := pc.take(now, input, total)
		if d == 0 {
			c.event.Paced = held
			return nil
		}
		if held+d > c.g.opts.PaceMaxWait || now.Add(d).After(c.deadline) {
			c.event.Paced = held
			return errPaced(cand.Name, d)
		}
		// Wait in short steps, so that a client that leaves is let go.
		step := min(d, 50*time.Millisecond)
		c.g.sleep(step, nil)
		held += step
		if c.gone.Load() {
			return errClientGone()
		}
	}
}

// take lets a call through at now, counting it, or says how long it must
// wait. input and total are its input tokens and its worst case.
func (p *pacer) take(now time.Time, input, total int64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	tokens := total
	if p.tokensInput {
		tokens = input
	}
	var wait time.Duration
	if now.Before(p.holdUntil) {
		wait = p.holdUntil.Sub(now)
	}
	wait = max(wait, p.requests.wait(now, 1), p.tokens.wait(now, tokens))
	if wait > 0 {
		return wait
	}
	p.requests.take(now, 1)
	p.tokens.take(now, tokens)
	return 0
}

// observe reads an answer's rate-limit headers.
func (p *pacer) observe(now time.Time, h *fasthttp.ResponseHeader, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the
	// reset a duration ("1s", "6m0s", "20ms").
	if rem, ok := headerInt(h, "x-ratelimit-remaining-requests"); ok {
		lim, _ := headerInt(h, "x-ratelimit-limit-requests")
		p.requests.set(now, lim, rem, now.Add(headerDuration(h, "x-ratelimit-reset-requests")))
	}
	if rem, ok := headerInt(h, "x-ratelimit-remaining-tokens"); ok {
		lim, _ := headerInt(h, "x-ratelimit-limit-tokens")
		p.tokens.set(now, lim, rem, now.Add(headerDuration(h, "x-ratelimit-reset-tokens")))
		p.tokensInput = false
	}
	// Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens}-
	// {limit,remaining,reset}, the reset an RFC 3339 time.
	if rem, ok := headerInt(h, "anthropic-ratelimit-requests-remaining"); ok {
		lim, _ := headerInt(h, "anthropic-ratelimit-requests-limit")
		p.requests.set(now, lim, rem, headerTime(h, "anthropic-ratelimit-requests-reset", now))
	}
	if rem, ok := headerInt(h, "anthropic-ratelimit-tokens-remaining"); ok {
		lim, _ := headerInt(h, "anthropic-ratelimit-tokens-limit")
		p.tokens.set(now, lim, rem, headerTime(h, "anthropic-ratelimit-tokens-reset", now))
		p.tokensInput = false
	} else if rem, ok := headerInt(h, "anthropic-ratelimit-input-tokens-remaining"); ok {
		lim, _ := headerInt(h, "anthropic-ratelimit-input-tokens-limit")
		p.tokens.set(now, lim, rem, headerTime(h, "anthropic-ratelimit-input-tokens-reset", now))
		p.tokensInput = true
	}
	if status == 429 {
		if d := retryAfter(h); d > 0 {
			p.holdUntil = now.Add(d)
		}
	}
}

// limits are what the provider last said it allows, for the rules that
// take their limit from it.
func (p *pacer) limits() sluice.ProviderLimits {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := sluice.ProviderLimits{Requests: p.requests.limit, HeldUntil: p.holdUntil}
	if p.tokensInput {
		l.InputTokens = p.tokens.limit
	} else {
		l.Tokens = p.tokens.limit
	}
	return l
}

func headerInt(h *fasthttp.ResponseHeader, name string) (int64, bool) {
	v := h.Peek(name)
	if len(v) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil && n >= 0
}

// headerDuration reads OpenAI's reset durations; 0 when absent or not one.
func headerDuration(h *fasthttp.ResponseHeader, name string) time.Duration {
	d, err := time.ParseDuration(string(h.Peek(name)))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// headerTime reads Anthropic's reset times; now when absent or not one.
func headerTime(h *fasthttp.ResponseHeader, name string, now time.Time) time.Time {
	t, err := time.Parse(time.RFC3339Nano, string(h.Peek(name)))
	if err != nil {
		return now
	}
	return t
}

// retryAfter reads retry-after-ms, else Retry-After in seconds.
func retryAfter(h *fasthttp.ResponseHeader) time.Duration {
	if ms, ok := headerInt(h, "retry-after-ms"); ok {
		return time.Duration(ms) * time.Millisecond
	}
	if s, ok := headerInt(h, "Retry-After"); ok {
		return time.Duration(s) * time.Second
	}
	return 0
}
