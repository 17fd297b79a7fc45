package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SessionStore keeps sessions for the gateway, shared by the replicas that
// share it. cmd/sluice serves it from the catalog (internal/catalogsessions).
// Its errors say what went wrong with errors.Is and errors.As:
// ErrUnknownSession, ErrSessionClosed, ErrTooManySessions,
// ErrInvalidSession and *SessionCeilingError; any other error is the store
// being unavailable.
type SessionStore interface {
	// OpenSession mints s for its key (KeyID, Org, Workspace, User, Model,
	// ExpiresAt and the ceilings set by the caller; ID and CreatedAt by the
	// store). With an IdempotencyKey the key already used, the session
	// minted then is returned, with created false. maxOpen > 0 caps the
	// user's open sessions (ErrTooManySessions).
	OpenSession(ctx context.Context, s Session, maxOpen int) (out Session, created bool, err error)
	// GetSession returns session id of key keyID (ErrUnknownSession for
	// another key's).
	GetSession(ctx context.Context, id, keyID string) (Session, error)
	// ChargeSession charges one call to session id of key keyID: a turn,
	// and the tokens and cost (micro-dollars) it reserves; input is its
	// input tokens, held against MaxContext. A call that would pass a
	// ceiling is refused with a *SessionCeilingError and charges nothing.
	ChargeSession(ctx context.Context, id, keyID string, tokens, cost, input int64) (Session, error)
	// SettleSession adds the differences between what a call used and
	// what it reserved (negative for a refund; turns is -1 to give back
	// the turn of a call the model never served).
	SettleSession(ctx context.Context, id string, turns, tokens, cost int64) error
	// CloseSession closes session id of key keyID; closing a closed
	// session returns it unchanged, with closed false.
	CloseSession(ctx context.Context, id, keyID string) (s Session, closed bool, err error)
}

// Session is a budget for a stretch of interactive work: calls on it are
// charged to it, up to its ceilings (zero: none), until it expires or is
// closed.
type Session struct {
	ID             string
	KeyID          string
	Org            string
	Workspace      string
	User           string
	Model          string
	IdempotencyKey string
	CreatedAt      time.Time
	ExpiresAt      time.Time
	ClosedAt       time.Time // zero while open
	MaxTurns       int64
	MaxTokens      int64
	MaxCost        int64 // micro-dollars
	MaxContext     int64 // input tokens of one call
	Turns          int64
	Tokens         int64
	Cost           int64 // micro-dollars
	// Ceiling names the ceiling that first refused a call: "wall_clock",
	// "turns", "tokens", "cost" or "context"; empty while none has.
	Ceiling string
}

// The refusals of a SessionStore, usable with errors.Is.
var (
	// ErrUnknownSession: no session has that ID for that key.
	ErrUnknownSession = errors.New("unknown session")
	// ErrSessionClosed: the session was closed.
	ErrSessionClosed = errors.New("session closed")
	// ErrTooManySessions: the user already has the most open sessions
	// allowed.
	ErrTooManySessions = errors.New("too many open sessions")
	// ErrInvalidSession: a session's terms fail validation; the error's
	// text says which and why, and is shown to the client.
	ErrInvalidSession = errors.New("invalid session")
)

// SessionCeilingError is a call refused by one of its session's ceilings.
type SessionCeilingError struct {
	Ceiling string // wall_clock, turns, tokens, cost or context
	// Limit and Used are in the ceiling's unit (turns, tokens,
	// micro-dollars; seconds for the wall clock); Want is what the call
	// would have added.
	Limit, Used, Want int64
	Session           Session
	// First is set when this is the first refusal of the session by a
	// ceiling.
	First bool
}

func (e *SessionCeilingError) Error() string {
	return fmt.Sprintf("session %s: %s ceiling reached (%s used)", e.Session.ID, e.Ceiling, ceilingPart(e.Ceiling, e.Used, e.Limit))
}
