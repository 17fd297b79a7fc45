package sluice

import (
	"cmp"
	"context"
	"time"
)

// Simple is the common case in one value: requests per minute, tokens per
// minute and calls in flight for one subject (each API key by default).
// Zero fields are not limited. Simple limits are checked together with
// Options.Rules, in the same atomic step.
type Simple struct {
	RequestsPerMinute int64
	TokensPerMinute   int64
	Concurrency       int64
	// Subject defaults to "key".
	Subject string
}

// Rules returns the rules Simple stands for, named simple_rpm, simple_tpm
// and simple_concurrency.
func (s Simple) Rules() []Rule {
	var rules []Rule
	for _, r := range []Rule{
		{Name: "simple_rpm", Kind: KindRate, Metric: MetricRequests, Limit: s.RequestsPerMinute, Window: time.Minute},
		{Name: "simple_tpm", Kind: KindRate, Metric: MetricTokens, Limit: s.TokensPerMinute, Window: time.Minute},
		{Name: "simple_concurrency", Kind: KindConcurrency, Limit: s.Concurrency},
	} {
		if r.Limit > 0 {
			r.Subject, r.Source = cmp.Or(s.Subject, "key"), "simple"
			rules = append(rules, r)
		}
	}
	return rules
}

// AdmitKey admits one call for an API key that may use up to tokens tokens
// (input and output together).
func (l *Limiter) AdmitKey(ctx context.Context, key string, tokens int64) (*Reservation, error) {
	return l.Admit(ctx, Request{Identity: Identity{Key: key}, Max: Usage{InputTokens: tokens}})
}
