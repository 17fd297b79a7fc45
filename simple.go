package sluice

import (
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
	subject := s.Subject
	if subject == "" {
		subject = "key"
	}
	var rules []Rule
	if s.RequestsPerMinute > 0 {
		rules = append(rules, Rule{Name: "simple_rpm", Kind: KindRate, Subject: subject,
			Metric: MetricRequests, Limit: s.RequestsPerMinute, Window: time.Minute, Source: "simple"})
	}
	if s.TokensPerMinute > 0 {
		rules = append(rules, Rule{Name: "simple_tpm", Kind: KindRate, Subject: subject,
			Metric: MetricTokens, Limit: s.TokensPerMinute, Window: time.Minute, Source: "simple"})
	}
	if s.Concurrency > 0 {
		rules = append(rules, Rule{Name: "simple_concurrency", Kind: KindConcurrency, Subject: subject,
			Limit: s.Concurrency, Source: "simple"})
	}
	return rules
}

// AdmitKey admits one call for an API key that may use up to tokens tokens
// (input and output together).
func (l *Limiter) AdmitKey(ctx context.Context, key string, tokens int64) (*Reservation, error) {
	return l.Admit(ctx, Request{Identity: Identity{Key: key}, Max: Usage{InputTokens: tokens}})
}
