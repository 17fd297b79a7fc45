// Package event is what the gateway tells its observer about each finished
// client request. It is apart from package gateway so that what observes
// requests (admin's metrics and request log) need not link the gateway.
package event

import (
	"time"

	"github.com/sluicehq/sluice"
)

// The identity headers a service key may assert, as Event.IgnoredIdentity
// names them (gateway.HeaderWorkspace and the others are these).
const (
	HeaderWorkspace = "X-Sluice-Workspace"
	HeaderUser      = "X-Sluice-User"
	HeaderTeam      = "X-Sluice-Team"
	// HeaderTurn is ignored from a key not allowed turns.
	HeaderTurn = "X-Sluice-Turn"
)

// Event describes one finished client request, for metrics and logs.
type Event struct {
	// RequestID names the request in the log and in its X-Request-Id
	// response header: the client's own, or one the gateway made.
	RequestID string
	// Org, Workspace and KeyID are who the request was charged to (its key
	// ID, never the key).
	Org, Workspace, KeyID string
	// Provider names the provider of the model that served (or last
	// failed).
	Provider string
	// Duration is the time from the request's arrival to its answer (to
	// its end, for a stream).
	Duration time.Duration
	Route    string
	Model    string
	Outcome  string // admitted, rate_limited, busy, budget_exceeded, too_large, store_error, upstream_error, bad_request, unauthorized
	Class    string // throttled, terminal, transient, or empty
	Status   int
	Attempts int
	Usage    sluice.Usage
	Decision time.Duration
	// Session is set for the events of a session: "opened" and "closed"
	// (route sessions), and "ceiling" on the call that is the session's
	// first refusal by a ceiling, which Ceiling names (wall_clock, turns,
	// tokens, cost).
	Session string
	Ceiling string
	// SessionEnded is set on the event that ended a session: its client's
	// close, or its first ceiling (the close of a session a ceiling had
	// ended does not end it again). SessionUsed is then what it used.
	SessionEnded bool
	SessionUsed  SessionUsage
	// Paced is how long the call was held for its provider's rate limit.
	Paced time.Duration
	// IgnoredIdentity names the identity headers (HeaderWorkspace,
	// HeaderUser, HeaderTeam) the request sent and its key may not assert,
	// and HeaderTurn from a key not allowed turns: they were ignored.
	IgnoredIdentity []string
	// ImpossibleUsage is set when the provider reported more usage than
	// the call could produce: it was not believed, and the reservation was
	// charged instead.
	ImpossibleUsage bool
	// UpstreamStatus is the HTTP status of the provider's last answer; 0
	// when no provider answered (refused before, or a connection error).
	UpstreamStatus int
	// Upstream is the time spent on the provider that served (or last
	// failed): from its first attempt to the end of its answer (a stream's
	// last event), retries and their waits included; 0 when none was
	// called.
	Upstream time.Duration
	// FirstToken is, for a stream, the time from the request's arrival to
	// the provider's first event, ready to forward; 0 otherwise.
	FirstToken time.Duration
	// Shadowed names the shadow rules that would have refused the request
	// (admitted all the same).
	Shadowed []string
	// FailedOpen names the rules that admitted the request uncharged
	// because the limit store did not answer (each says
	// on_store_error: open).
	FailedOpen []string
	// SessionID is the session the call was charged to (X-Sluice-Session),
	// if any.
	SessionID string
	// Tags are the request's X-Sluice-Tags, as the gateway kept them.
	Tags []string
	// Cause is why a failed request failed, for the log only: it may name
	// internal addresses, which the client is never told. Nil for an
	// admitted call and for a refusal by a limit.
	Cause error
	// BudgetWarnings are the budget thresholds and soft limits the
	// admission found reached (the X-Sluice-Budget-Warning header's).
	BudgetWarnings []sluice.Warning
	// Classes are the priority classes of the call's admission, one per
	// class rule: the class, its floor and share, and the class whose
	// share it borrowed, if any (the admission's Result.Classes). Empty
	// when no class rule applied or the call was not admitted.
	Classes []sluice.ClassShare
	// RefusedClass is the class of a refusal by a class rule, waited for
	// or not (the refusal's Refusal.Class); nil for any other answer.
	RefusedClass *sluice.ClassShare
	// Cache is how the response cache took part: hit, miss, bypass, or
	// empty when the call's model keeps no answers. CacheSaved is, for a
	// hit, the cost in micro-dollars of the call whose answer it replayed.
	Cache      string
	CacheSaved int64
	// LiveClose is the close code that ended a live connection (route
	// realtime; 0 for every other request and for its responses),
	// LiveCause why (client_gone, provider_gone, provider_close, ceiling,
	// budget, seconds, store_unavailable, session_closed, max_duration,
	// frame_too_large, shutdown), and LiveSeconds how long it was open.
	LiveClose   int
	LiveCause   string
	LiveSeconds time.Duration
}

// SessionUsage is what a session used.
type SessionUsage struct {
	Turns, Tokens, Cost int64
}
