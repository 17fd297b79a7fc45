package retry

import (
	"strconv"
	"strings"
)

// WebSocket close codes a live session (the OpenAI Realtime API through
// Sluice) ends with (RFC 6455, section 7.4.1).
const (
	// CloseNormal ends a session its peer was done with.
	CloseNormal = 1000
	// CloseGoingAway: the server is shutting down or the peer left.
	CloseGoingAway = 1001
	// CloseMessageTooBig: a frame over the peer's size cap.
	CloseMessageTooBig = 1009
	// CloseInternalError is a server's failure; with "quota",
	// "exceeded" or "resource_exhausted" in its reason, a quota or
	// ceiling that ended the session (terminal).
	CloseInternalError = 1011
	// CloseTryAgainLater: a transient overload or outage (Sluice's limit
	// store unavailable).
	CloseTryAgainLater = 1013
)

// quotaWords are the words of a close reason that say a quota, budget or
// ceiling ended the session: reconnecting cannot help, and on a metered
// API every attempt may cost something.
var quotaWords = []string{"quota", "exceeded", "resource_exhausted"}

// ClassifyClose classifies how a WebSocket connection (a live session)
// ended, by its close code and reason, as a client decides whether to
// reconnect:
//
//   - [Success]: code 1000, a normal closure; nothing to reconnect for.
//   - [Terminal]: code 1011 whose reason contains "quota", "exceeded" or
//     "resource_exhausted", in any case: a quota, budget or session
//     ceiling ended the session (Sluice closes so when a ceiling is
//     reached). Never reconnect.
//   - [Transient]: any other code (1001 going away, 1006 no close frame,
//     1011 without those words, 1013 try again later, ...): reconnect with
//     backoff, a bounded number of times.
//
// This is the close handler of a live audio product's client, which
// reconnects on every close but a normal one, unless the close says a
// quota was reached.
func ClassifyClose(code int, reason string) Decision {
	if code == CloseNormal {
		return Decision{Class: Success, Reason: "close 1000"}
	}
	if code == CloseInternalError {
		r := strings.ToLower(reason)
		for _, w := range quotaWords {
			if strings.Contains(r, w) {
				return Decision{Class: Terminal, Reason: "close 1011 " + w}
			}
		}
	}
	return Decision{Class: Transient, Reason: "close " + strconv.Itoa(code)}
}
