package sluicehttp

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// The rate-limit header fields of every answer, admitted or refused.

// HeaderSetter is what SetHeaders writes through: an http.Header, or
// another server's response header (fasthttp's) with the same two methods.
// One that also has SetBytes(name string, value []byte), copying value, is
// given the numbers of every answer's fields as bytes built on the stack,
// with no string made for them.
type HeaderSetter interface {
	Set(name, value string)
	Add(name, value string)
}

// bytesSetter is a HeaderSetter that takes a value as bytes it copies.
type bytesSetter interface {
	SetBytes(name string, value []byte)
}

// set sets name to value, which h must copy.
func set(h HeaderSetter, name string, value []byte) {
	if b, ok := h.(bytesSetter); ok {
		b.SetBytes(name, value)
		return
	}
	h.Set(name, string(value))
}

// SetHeaders writes an admission's headers on h: the X-RateLimit and IETF
// RateLimit fields of the rule with the least room (reset counted from
// now), OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} for
// the request and token rules with the least room, and one
// X-Sluice-Budget-Warning per warning.
func SetHeaders(h HeaderSetter, r sluice.Result, now time.Time) {
	buf := make([]byte, 0, 128) // the values are built here, one at a time
	if r.Rule != "" {
		setLimitHeaders(h, buf, r.Headroom, now)
	}
	setOpenAILimitHeaders(h, buf, openAIRequestHeaders, r.Requests, now)
	setOpenAILimitHeaders(h, buf, openAITokenHeaders, r.Tokens, now)
	for _, w := range r.Warnings {
		v := w.Rule + "; used=" + strconv.FormatInt(w.Used, 10) + "; limit=" + strconv.FormatInt(w.Limit, 10)
		if w.Soft {
			v += "; soft"
		} else {
			v += "; threshold=" + strconv.FormatFloat(w.Threshold, 'g', -1, 64)
		}
		h.Add("X-Sluice-Budget-Warning", v)
	}
}

// SetHeaders writes the refusal's headers on h: Retry-After and
// retry-after-ms when there is a wait, x-should-retry: false when terminal,
// and the X-RateLimit and IETF RateLimit fields of the deciding rule, reset
// counted from now. It is the one place a refusal's headers are made, for
// the middleware, the SDK wrappers and the gateway.
func (r *Refusal) SetHeaders(h HeaderSetter, now time.Time) {
	buf := make([]byte, 0, 128)
	switch {
	case r.refusal != nil:
		setLimitHeaders(h, buf, headroom(r.refusal), now)
	case r.result != nil && r.result.Rule != "":
		// Never fits: the fields describe the rule the request never
		// fits, as its body does, however much room it has.
		setLimitHeaders(h, buf, r.result.Headroom, now)
	}
	if r.result != nil {
		setOpenAILimitHeaders(h, buf, openAIRequestHeaders, r.result.Requests, now)
		setOpenAILimitHeaders(h, buf, openAITokenHeaders, r.result.Tokens, now)
	}
	if r.RetryAfter > 0 {
		secs := (r.RetryAfter + time.Second - 1) / time.Second
		h.Set("Retry-After", strconv.FormatInt(int64(secs), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(r.RetryAfter.Milliseconds(), 10))
	}
	if r.Terminal {
		h.Set("X-Should-Retry", "false")
	}
}

// headroom is the deciding rule of a refusal as the header fields
// describe it.
func headroom(r *sluice.Refusal) sluice.Headroom {
	window := r.Window
	switch r.Kind {
	case sluice.KindBudget:
		if !r.ResetAt.IsZero() {
			start, end := sluice.PeriodBounds(r.Period, r.ResetAt.Add(-time.Nanosecond), r.ResetAt.Location())
			window = end.Sub(start)
		}
	case sluice.KindConcurrency:
		window = 0
	}
	return sluice.Headroom{Rule: r.Rule, Kind: r.Kind, Metric: r.Metric, Limit: r.Limit, Remaining: r.Remaining, ResetAt: r.ResetAt, Window: window}
}

// setLimitHeaders writes X-RateLimit-Limit, -Remaining and -Reset (seconds)
// and the IETF RateLimit-Policy and RateLimit fields for r, reset counted
// from now, building each value in buf.
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
func setLimitHeaders(h HeaderSetter, buf []byte, r sluice.Headroom, now time.Time) {
	reset := int64(0)
	if d := r.ResetAt.Sub(now); d > 0 {
		reset = int64((d + time.Second - 1) / time.Second)
	}
	remaining := max(0, r.Remaining)
	set(h, "X-RateLimit-Limit", strconv.AppendInt(buf[:0], r.Limit, 10))
	set(h, "X-RateLimit-Remaining", strconv.AppendInt(buf[:0], remaining, 10))
	set(h, "X-RateLimit-Reset", strconv.AppendInt(buf[:0], reset, 10))
	policy := append(strconv.AppendQuote(buf[:0], r.Rule), ";q="...)
	policy = strconv.AppendInt(policy, r.Limit, 10)
	if unit := quotaUnit(r.Kind, r.Metric); unit != "" {
		policy = strconv.AppendQuote(append(policy, ";qu="...), unit)
	}
	if r.Window > 0 {
		policy = strconv.AppendInt(append(policy, ";w="...), int64((r.Window+time.Second-1)/time.Second), 10)
	}
	set(h, "RateLimit-Policy", policy)
	limits := append(strconv.AppendQuote(buf[:0], r.Rule), ";r="...)
	limits = strconv.AppendInt(limits, remaining, 10)
	limits = strconv.AppendInt(append(limits, ";t="...), reset, 10)
	set(h, "RateLimit", limits)
}

// quotaUnit is the qu parameter of a rule's policy; "" for requests.
func quotaUnit(kind sluice.Kind, m sluice.Metric) string {
	switch {
	case kind == sluice.KindConcurrency || m == sluice.MetricConcurrency:
		return "concurrent-requests"
	case m == sluice.MetricRequests || m == "":
		return ""
	case m == sluice.MetricCost:
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
func setOpenAILimitHeaders(h HeaderSetter, buf []byte, names openAILimitHeaders, r sluice.Headroom, now time.Time) {
	if r.Rule == "" {
		return
	}
	reset := max(r.ResetAt.Sub(now), 0)
	if reset > time.Second {
		reset = reset.Round(time.Second)
	} else {
		reset = reset.Round(time.Millisecond)
	}
	set(h, names.limit, strconv.AppendInt(buf[:0], r.Limit, 10))
	set(h, names.remaining, strconv.AppendInt(buf[:0], max(r.Remaining, 0), 10))
	h.Set(names.reset, reset.String())
}
