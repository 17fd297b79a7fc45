package gateway

import (
	"bytes"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// HeaderMaxWait asks the gateway to let the request wait for rate and
// concurrency rules up to so many seconds ("2.5"), within the bound of the
// key's tier (Options.TierMaxWait) or the deployment (BatchMaxWait); 0 asks
// not to wait. X-Sluice-Priority: batch alone waits up to the bound.
const HeaderMaxWait = "X-Sluice-Max-Wait"

// HeaderTurn groups the calls of one agent turn (the model calls that
// answer one user message): a rate rule on requests charges the turn once
// per key within its window (sluice.Request.Turn). Token and cost rules
// count every call.
const HeaderTurn = "X-Sluice-Turn"

// turnOf reads the request's turn id: empty without the header, 400 when
// it is not one short printable value.
func turnOf(h *fasthttp.RequestHeader) (string, error) {
	raw := h.Peek(HeaderTurn)
	if raw == nil {
		return "", nil
	}
	v, err := parseAssertedValue(raw)
	if err != nil {
		return "", &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_turn", param: HeaderTurn,
			message: "The " + HeaderTurn + " header " + err.Error() + "; it must be one id of at most 256 bytes, without control characters."}
	}
	return v, nil
}

// maxWait returns how long the call may wait for rate and concurrency
// rules: 0 unless it asks to, and never beyond its tier's bound.
func (g *Gateway) maxWait(h *fasthttp.RequestHeader, tier string) (time.Duration, error) {
	bound := g.opts.BatchMaxWait
	if d, ok := g.opts.TierMaxWait[tier]; ok && d > 0 {
		bound = d
	}
	asked := h.Peek(HeaderMaxWait)
	if len(asked) == 0 {
		if bytes.EqualFold(h.Peek(HeaderPriority), []byte("batch")) {
			return bound, nil
		}
		return 0, nil
	}
	s, err := strconv.ParseFloat(string(asked), 64)
	if err != nil || s < 0 || math.IsInf(s, 0) || math.IsNaN(s) {
		return 0, errMaxWaitHeader(string(asked))
	}
	if s >= bound.Seconds() {
		return bound, nil
	}
	return time.Duration(s * float64(time.Second)), nil
}

func errMaxWaitHeader(v string) error {
	return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_max_wait", param: HeaderMaxWait,
		message: "The " + HeaderMaxWait + " header must be a number of seconds, 0 or more (\"2.5\"), not " + strconv.Quote(v) + "."}
}
