package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/fasthttp/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/sluicehttp"
)

// How a limit speaks on a live connection: the Realtime API's error event
// (its error object carries Sluice's limit object and, for a throttle, the
// retry hint), and, when the limit ends the session, a close:
//
//   - a session ceiling reached (wall clock, turns, context; tokens or
//     cost without room for the smallest response the conversation
//     allows), a spent budget, or a rule the conversation outgrew: 1011
//     with "quota exceeded" in the reason, which clients (the seed's
//     close handler, retry.ClassifyClose) take as terminal;
//   - the limit or session store unavailable: 1013, without those words
//     (a reconnect may work);
//   - a closed session: 1000.
//
// A throttle (a rate, a concurrency cap, a budget with room left for a
// smaller response, a response too large) refuses that response alone.

// liveError is the error object of an error event.
type liveError struct {
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	EventID *string `json:"event_id"`
	// Limit is the limit that refused, as in an HTTP refusal's body.
	Limit any `json:"limit,omitempty"`
	// RetryAfterMS is when a throttled response.create may be sent
	// again.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// liveEventSeq numbers the gateway's own events.
var liveEventSeq atomic.Int64

// errorEvent writes e as an error event.
func errorEventOf(e liveError) []byte {
	b, _ := json.Marshal(struct {
		Type    string    `json:"type"`
		EventID string    `json:"event_id"`
		Error   liveError `json:"error"`
	}{"error", "event_sluice_" + strconv.FormatInt(liveEventSeq.Add(1), 10), e})
	return b
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// badEvent is the error event answering a client event the gateway does
// not forward.
func badEvent(code, message, eventID string) []byte {
	return errorEventOf(liveError{Type: "invalid_request_error", Code: code, Message: message, EventID: optional(eventID)})
}

// badEventError is the error event of an event whose field is invalid.
func badEventError(err error, eventID string) []byte {
	var re *llm.RequestError
	if errors.As(err, &re) {
		return errorEventOf(liveError{Type: "invalid_request_error", Code: "invalid_value", Message: re.Message, Param: optional(re.Param), EventID: optional(eventID)})
	}
	return badEvent("invalid_event", err.Error(), eventID)
}

// errorEvent is the error event of a refused response.create, and the
// HTTP status the same refusal would have had (for the event's record).
func (lc *liveConn) errorEvent(err error, eventID string) ([]byte, int) {
	e := liveError{EventID: optional(eventID)}
	status := 500
	var ae *apiError
	if hr, ok := sluicehttp.RefusalOf(err); ok {
		status, e.Code, e.Message = hr.Status, hr.Code, hr.Message
		e.Type, _ = errorTypes(hr.Code)
		if hr.Limit != nil {
			e.Limit = hr.Limit
		}
		if !hr.Terminal && hr.RetryAfter > 0 {
			e.RetryAfterMS = max(1, hr.RetryAfter.Milliseconds())
		}
		var fh *fitHint
		if errors.As(err, &fh) {
			e.Message += fmt.Sprintf(" The largest max_output_tokens that fits now is %d.", fh.maxTokens)
		}
	} else if errors.As(err, &ae) {
		status, e.Type, e.Code, e.Message = ae.status, ae.typ, ae.code, ae.message
		if ae.limit != nil {
			e.Limit = ae.limit
		}
		if !ae.terminal && ae.retryHint > 0 {
			e.RetryAfterMS = ae.retryHint.Milliseconds()
		}
	} else {
		e.Type, e.Code, e.Message = "server_error", "internal_error", "Internal error."
	}
	return errorEventOf(e), status
}

// maxCloseReason is the most bytes a close frame's reason may hold.
const maxCloseReason = 123

// limitClose is the close a refusal ends the session with, and its cause
// (for metrics); code 0 when it refuses one response only. least is the smallest response the session
// could still make (its conversation, and one output token): a budget or
// a rule that cannot hold even that is reached for the session, whatever
// the client lowers.
func limitClose(err error, least sluice.Usage) (code int, reason, cause string) {
	var ae *apiError
	var bu *sluice.BudgetError
	var tl *sluice.TooLargeError
	switch {
	case errors.Is(err, sluice.ErrStoreUnavailable):
		return websocket.CloseTryAgainLater, "limit store unavailable; retry later", causeStore
	case errors.As(err, &bu):
		if n, ok := amountOf(least, bu.Metric); ok && bu.Remaining < n {
			return websocket.CloseInternalServerErr, closeReason("quota exceeded: budget " + bu.Rule + " reached"), causeBudget
		}
		return 0, "", ""
	case errors.As(err, &tl):
		if n, ok := amountOf(least, tl.Metric); ok && tl.Limit < n {
			return websocket.CloseInternalServerErr, closeReason("quota exceeded: the conversation outgrew " + tl.Rule), causeBudget
		}
		return 0, "", ""
	case !errors.As(err, &ae):
		return 0, "", ""
	case ae.code == "session_ceiling_reached":
		ceiling := "session"
		if l := ae.limit; l != nil {
			// A token or cost ceiling with room for a smaller response
			// refuses this one only.
			if n, ok := amountOf(least, sluice.Metric(l.Metric)); ok && (l.Metric == "tokens" || l.Metric == "cost") && l.Remaining >= n {
				return 0, "", ""
			}
			ceiling = ceilingWords(strings.TrimPrefix(l.Rule, "session_"))
		}
		return websocket.CloseInternalServerErr, closeReason("quota exceeded: session " + ceiling + " ceiling reached"), causeCeiling
	case ae.code == "session_store_unavailable":
		return websocket.CloseTryAgainLater, "session store unavailable; retry later", causeStore
	case ae.code == "session_closed":
		return websocket.CloseNormalClosure, "session closed", causeSessionClosed
	}
	return 0, "", ""
}

// Why a live connection ended (Event.LiveCause).
const (
	causeClientGone    = "client_gone"
	causeProviderGone  = "provider_gone"
	causeProviderClose = "provider_close"
	causeCeiling       = "ceiling"
	causeBudget        = "budget"
	causeSeconds       = "seconds"
	causeStore         = "store_unavailable"
	causeSessionClosed = "session_closed"
	causeMaxDuration   = "max_duration"
	causeFrameTooLarge = "frame_too_large"
	causeShutdown      = "shutdown"
)

// amountOf is how much of metric u holds, for the metrics a response
// charges by its size; false for the others.
func amountOf(u sluice.Usage, metric sluice.Metric) (int64, bool) {
	switch metric {
	case sluice.MetricTokens:
		return u.InputTokens + u.OutputTokens, true
	case sluice.MetricInputTokens:
		return u.InputTokens, true
	case sluice.MetricUncachedInputTokens:
		return u.InputTokens - u.CachedInputTokens, true
	case sluice.MetricOutputTokens:
		return u.OutputTokens, true
	case sluice.MetricCost:
		return u.Cost, true
	case sluice.MetricRequests:
		return 1, true
	}
	return 0, false
}

// closeReason cuts a reason to what a close frame holds, on a rune's
// boundary.
func closeReason(s string) string {
	if len(s) <= maxCloseReason {
		return s
	}
	s = s[:maxCloseReason]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// sendError sends the client an error event; the connection goes on.
func (lc *liveConn) sendError(ev []byte) { lc.send(websocket.TextMessage, ev) }

// timeUp ends a connection at its deadline: its session's wall-clock
// ceiling (a quota close), or the gateway's LiveMaxDuration.
func (lc *liveConn) timeUp() {
	c := lc.c
	if !c.session.endsCall {
		lc.end(websocket.CloseNormalClosure, "maximum connection duration reached", causeMaxDuration, errorEventOf(liveError{Type: "invalid_request_error",
			Code: "max_duration_reached", Message: fmt.Sprintf("This gateway closes live connections after %s; open a new one.", lc.g.opts.LiveMaxDuration)}))
		return
	}
	err := errWallClockReached(c.session.id).(*apiError)
	err.message = fmt.Sprintf("Session %s reached its wall-clock ceiling; the connection is closed. Open a new session.", c.session.id)
	ev, _ := lc.errorEvent(err, "")
	lc.end(websocket.CloseInternalServerErr, "quota exceeded: session wall-clock ceiling reached", causeCeiling, ev)
}

// quote quotes a client's event type for a message, cut to 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strconv.Quote(s)
}
