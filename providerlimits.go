package sluice

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// SetProviderLimits records what model's provider allows, in place of what
// it said before; the next admission uses it. A rate rule with LimitFrom
// LimitFromProvider then takes as its Limit, for the calls whose
// Identity.Model is model, the count of its metric (requests, tokens,
// input_tokens) converted to its window, higher or lower than its own
// Limit: the provider knows. Its own Limit applies while the provider
// gave no count. The zero ProviderLimits forgets model. Each replica
// sets what its own answers say; the counters stay in the store, shared.
func (l *Limiter) SetProviderLimits(model string, p ProviderLimits) {
	if l.hooks.setProviderLimits != nil {
		l.hooks.setProviderLimits(model, p)
	}
}

// installProviderLimits gives a Limiter its record of what the providers
// allow (SetProviderLimits), from which the rules with LimitFrom
// LimitFromProvider take their limit, and by which they are held.
func installProviderLimits(l *Limiter, _ *Options) {
	pl := &providerLimits{retryBuffer: l.retryBuffer}
	l.hooks.providerLimit, l.hooks.held, l.hooks.setProviderLimits = pl.limitOf, pl.held, pl.set
}

// providerLimits holds each model's ProviderLimits. The gateway sets them
// at every answer, mostly unchanged, and every admission of a rule from
// the provider reads them.
type providerLimits struct {
	mu     sync.RWMutex
	models map[string]ProviderLimits
	// retryBuffer is the Limiter's Options.RetryAfterBuffer, added to a
	// hold's retry hint as to any rate refusal's.
	retryBuffer time.Duration
}

func (pl *providerLimits) set(model string, p ProviderLimits) {
	pl.mu.RLock()
	old, ok := pl.models[model]
	pl.mu.RUnlock()
	if ok && old == p || !ok && p == (ProviderLimits{}) {
		return
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p == (ProviderLimits{}) {
		delete(pl.models, model)
		return
	}
	if pl.models == nil {
		pl.models = map[string]ProviderLimits{}
	}
	pl.models[model] = p
}

func (pl *providerLimits) get(model string) ProviderLimits {
	pl.mu.RLock()
	defer pl.mu.RUnlock()
	return pl.models[model]
}

// limitOf returns r's limit from what the provider allows model, per r's
// window, and whether the provider gave one.
func (pl *providerLimits) limitOf(r *compiledRule, model string) (int64, bool) {
	p := pl.get(model)
	var n int64
	switch r.metric {
	case MetricRequests:
		n = p.Requests
	case MetricTokens:
		n = p.Tokens
	case MetricInputTokens, MetricUncachedInputTokens:
		n = p.InputTokens
	}
	if n <= 0 {
		return 0, false
	}
	per := p.Per
	if per <= 0 {
		per = time.Minute
	}
	// n*window/per rounded down, at least 1, in 128 bits.
	hi, lo := bits.Mul64(uint64(n), uint64(r.Window))
	if hi >= uint64(per) {
		return math.MaxInt64, true
	}
	q, _ := bits.Div64(hi, lo, uint64(per))
	return max(1, int64(min(q, math.MaxInt64))), true
}

// held refuses an admission of a call to model whose charges include a
// rule from the provider while the provider asked to wait: the call would
// be refused upstream. It is a rate refusal, so a call that may wait waits
// for it.
func (pl *providerLimits) held(cs *charges, model string, now time.Time) error {
	for i := range cs.in {
		c := cs.at(i)
		if c.Shadow || c.rule.LimitFrom != LimitFromProvider {
			continue
		}
		until := pl.get(model).HeldUntil
		if !now.Before(until) {
			return nil // one model per request: held for every such rule, or for none
		}
		c.Used, c.Remaining, c.ResetAt = c.Limit, 0, until
		c.RetryAfter = ceilMillisecond(until.Sub(now)) + pl.retryBuffer
		ref := refusalOf(c, nil)
		ref.Source, ref.RetryAt = LimitFromProvider, now.Add(c.RetryAfter)
		return &RateLimitError{ref}
	}
	return nil
}

// checkProviderRule refuses a rule with LimitFrom LimitFromProvider that
// is unfit to take its limit from the provider.
func checkProviderRule(c *compiledRule) error {
	r, m := &c.Rule, c.metric
	if r.LimitFrom != LimitFromProvider {
		return nil
	}
	var unfit string
	switch {
	case r.Kind != KindRate:
		unfit = "a provider's limits are rates: the rule must be a rate rule"
	case m != MetricRequests && m != MetricTokens && m != MetricInputTokens && m != MetricUncachedInputTokens:
		unfit = "providers give limits of requests, tokens and input tokens (input_tokens, uncached_input_tokens), not " + string(m)
	case r.Subject != "model" && r.Subject != "global":
		unfit = "a provider's limit is shared by every caller: the subject must be model or global, not " + r.Subject
	case r.Subject == "global" && len(r.Match.Models) != 1:
		unfit = "a provider limits each model apart: a global rule must match one model (subject model counts each apart)"
	default:
		return nil
	}
	return &RuleError{Rule: r.Name, Field: "limit_from", Message: unfit}
}
