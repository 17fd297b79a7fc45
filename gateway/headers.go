package gateway

import (
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/valyala/fasthttp"
)

// canonicalHeaders is the sluicehttp.HeaderSetter of a fasthttp response
// header. The names written on every answer (the library's rate-limit and
// retry fields, the gateway's own) are written in the canonical form
// fasthttp gives them ("X-Ratelimit-Limit-Requests"), worked out once in
// canonicalNames rather than on every Set; any other name goes through
// Set, which works it out. The header a client reads is the same either
// way.
type canonicalHeaders struct{ h *fasthttp.ResponseHeader }

var _ sluicehttp.HeaderSetter = canonicalHeaders{}

// canonicalNames maps each name written on every answer to its canonical
// form.
var canonicalNames = canonicalForms(
	// The library's (sluicehttp.SetHeaders, Refusal.SetHeaders).
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit",
	"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
	"Retry-After", "Retry-After-Ms", "X-Should-Retry",
	// The gateway's.
	HeaderRequestID, headerAnthropicRequestID, headerModel, HeaderCostMicros,
)

// headerModel names the model that served the call.
const headerModel = "X-Sluice-Model"

func canonicalForms(names ...string) map[string][]byte {
	m := make(map[string][]byte, len(names))
	for _, name := range names {
		m[name] = fasthttp.AppendNormalizedHeaderKey(nil, name)
	}
	return m
}

// Set sets name to value, replacing any value it had.
func (c canonicalHeaders) Set(name, value string) {
	if key, ok := canonicalNames[name]; ok {
		c.h.SetCanonical(key, []byte(value))
		return
	}
	c.h.Set(name, value)
}

// SetBytes sets name to value, copied: the library's fields of every
// answer, built without a string.
func (c canonicalHeaders) SetBytes(name string, value []byte) {
	if key, ok := canonicalNames[name]; ok {
		c.h.SetCanonical(key, value)
		return
	}
	c.h.SetBytesV(name, value)
}

// Add adds value under name (budget warnings, class headers: not on every
// answer).
func (c canonicalHeaders) Add(name, value string) { c.h.Add(name, value) }
