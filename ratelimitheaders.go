package sluice

import (
	"strconv"
	"strings"
	"time"
)

// The rate-limit header fields of every answer, admitted or refused.

// headroom is the deciding rule of a refusal as the header fields
// describe it.
func (r *Refusal) headroom() Headroom {
	window := r.Window
	switch r.Kind {
	case KindBudget:
		if !r.ResetAt.IsZero() {
			start, end := PeriodBounds(r.Period, r.ResetAt.Add(-time.Nanosecond), r.ResetAt.Location())
			window = end.Sub(start)
		}
	case KindConcurrency:
		window = 0
	}
	return Headroom{Rule: r.Rule, Kind: r.Kind, Metric: r.Metric, Limit: r.Limit, Remaining: r.Remaining, ResetAt: r.ResetAt, Window: window}
}

// policyWindow is the time window of a charge's rule: a rate rule's refill
// window, a budget's current period (a month is as long as it is); none
// for concurrency.
func policyWindow(c *Charge) time.Duration {
	switch c.Kind {
	case KindRate:
		return c.Window
	case KindBudget:
		if !c.PeriodEnd.IsZero() {
			return c.PeriodEnd.Sub(time.Unix(c.Key.Period, 0))
		}
	}
	return 0
}

// setLimitHeaders writes X-RateLimit-Limit, -Remaining and -Reset (seconds)
// and the IETF RateLimit-Policy and RateLimit fields for r, reset counted
// from now.
//
// The IETF fields follow draft-ietf-httpapi-ratelimit-headers-11 (§3, §4):
// RateLimit-Policy: "name";q=<quota>;qu="<unit>";w=<window seconds> and
// RateLimit: "name";r=<remaining>;t=<seconds>. qu is left out for requests,
// the draft's default unit, and is "concurrent-requests" for a concurrency
// rule, as registered; a rule counting tokens or money names its metric
// ("tokens", "input-tokens", "micro-dollars"): the draft registers no unit
// for them, and leaving qu out would claim requests, which is false. w is
// the rule's window rounded up to a whole second (the draft allows no
// fraction, nor zero), a budget's being its period; a concurrency rule has
// none.
func setLimitHeaders(h HeaderSetter, r Headroom, now time.Time) {
	reset := int64(0)
	if d := r.ResetAt.Sub(now); d > 0 {
		reset = int64((d + time.Second - 1) / time.Second)
	}
	remaining := max(0, r.Remaining)
	limit := strconv.FormatInt(r.Limit, 10)
	h.Set("X-RateLimit-Limit", limit)
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	// Every answer carries these two, so each is built in one buffer.
	var buf [128]byte
	policy := append(strconv.AppendQuote(buf[:0], r.Rule), ";q="...)
	policy = append(policy, limit...)
	if unit := quotaUnit(r.Kind, r.Metric); unit != "" {
		policy = strconv.AppendQuote(append(policy, ";qu="...), unit)
	}
	if r.Window > 0 {
		policy = strconv.AppendInt(append(policy, ";w="...), int64((r.Window+time.Second-1)/time.Second), 10)
	}
	h.Set("RateLimit-Policy", string(policy))
	limits := append(strconv.AppendQuote(buf[:0], r.Rule), ";r="...)
	limits = strconv.AppendInt(limits, remaining, 10)
	limits = strconv.AppendInt(append(limits, ";t="...), reset, 10)
	h.Set("RateLimit", string(limits))
}

// quotaUnit is the qu parameter of a rule's policy; "" for requests.
func quotaUnit(kind Kind, m Metric) string {
	switch {
	case kind == KindConcurrency || m == MetricConcurrency:
		return "concurrent-requests"
	case m == MetricRequests || m == "":
		return ""
	case m == MetricCost:
		return "micro-dollars"
	}
	return strings.ReplaceAll(string(m), "_", "-")
}

// openAILimitHeaders are the names of OpenAI's x-ratelimit fields for one
// unit.
type openAILimitHeaders struct{ limit, remaining, reset string }

var (
	openAIRequestHeaders = openAILimitHeaders{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"}
	openAITokenHeaders   = openAILimitHeaders{"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"}
)

// setOpenAILimitHeaders writes OpenAI's x-ratelimit-{limit,remaining,
// reset}-<unit> (names) for the rule of that unit with the least room, so
// that a client (or another Sluice pacing from these headers) reads Sluice
// as it reads OpenAI; the reset is a duration ("1s", "6m0s").
func setOpenAILimitHeaders(h HeaderSetter, names openAILimitHeaders, r Headroom, now time.Time) {
	if r.Rule == "" {
		return
	}
	reset := max(r.ResetAt.Sub(now), 0)
	if reset > time.Second {
		reset = reset.Round(time.Second)
	} else {
		reset = reset.Round(time.Millisecond)
	}
	h.Set(names.limit, strconv.FormatInt(r.Limit, 10))
	h.Set(names.remaining, strconv.FormatInt(max(r.Remaining, 0), 10))
	h.Set(names.reset, reset.String())
}
