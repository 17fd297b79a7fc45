package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway/event"
	"github.com/valyala/fasthttp"
)

// HeaderMaxWait asks the gateway to let the request wait for rate and
// concurrency rules up to so many seconds ("2.5"), within the bound of the
// key (Principal.MaxWait), else of its tier (Options.TierMaxWait), else of
// the deployment (BatchMaxWait); 0 asks not to wait. X-Sluice-Priority:
// batch alone waits up to the bound.
const HeaderMaxWait = "X-Sluice-Max-Wait"

// HeaderTurn groups the calls of one agent turn (the model calls that
// answer one user message): a rate rule on requests charges the turn once
// per key within its window (sluice.Request.Turn). Token and cost rules
// count every call.
const HeaderTurn = event.HeaderTurn

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

// waitBound is the longest who's calls may wait, and what sets it, as a
// refusal after a wait names it: the key's own max_wait, else its tier's,
// else the deployment's.
func (g *Gateway) waitBound(who *Principal) (time.Duration, string) {
	if who.MaxWait > 0 {
		return who.MaxWait, "its key's max_wait"
	}
	if d := g.opts.TierMaxWait[who.Tier]; d > 0 {
		return d, fmt.Sprintf("the max_wait of its tier %q", who.Tier)
	}
	return g.opts.BatchMaxWait, "the deployment's max_wait"
}

// maxWait returns how long the call may wait for rate and concurrency
// rules, and what sets that: 0 unless it asks to, and never beyond the
// bound of its key, tier or deployment (waitBound).
func (g *Gateway) maxWait(h *fasthttp.RequestHeader, who *Principal) (time.Duration, string, error) {
	asked := h.Peek(HeaderMaxWait)
	if len(asked) == 0 {
		if !bytes.EqualFold(h.Peek(HeaderPriority), []byte("batch")) {
			return 0, "", nil
		}
		bound, source := g.waitBound(who)
		return bound, source, nil
	}
	s, err := strconv.ParseFloat(string(asked), 64)
	if err != nil || s < 0 || math.IsInf(s, 0) || math.IsNaN(s) {
		return 0, "", errMaxWaitHeader(string(asked))
	}
	bound, source := g.waitBound(who)
	if s >= bound.Seconds() {
		return bound, source, nil
	}
	return time.Duration(s * float64(time.Second)), "its " + HeaderMaxWait + " header", nil
}

// waitHint is a rate or busy refusal of a call that could wait, with how
// long it could and what set that bound.
type waitHint struct {
	error
	maxWait time.Duration
	source  string
}

func (w *waitHint) Unwrap() error { return w.error }

// withWaitHint adds to a rate or busy refusal of a call that could wait
// the bound of its wait and where that came from, so that a client told
// "busy" after a short wait learns why it was not longer.
func (c *call) withWaitHint(err error) error {
	if c.maxWait <= 0 || !errors.Is(err, sluice.ErrRateLimited) && !errors.Is(err, sluice.ErrBusy) {
		return err
	}
	return &waitHint{error: err, maxWait: c.maxWait, source: c.waitSource}
}

func errMaxWaitHeader(v string) error {
	return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_max_wait", param: HeaderMaxWait,
		message: "The " + HeaderMaxWait + " header must be a number of seconds, 0 or more (\"2.5\"), not " + strconv.Quote(v) + "."}
}
