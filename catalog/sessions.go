package catalog

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/dollars"
)

// Session is a gate for long interactive work: minted once with its
// ceilings (wall clock, turns, tokens, cost), then charged by every call
// that carries its ID. A zero ceiling is no ceiling (wall clock excepted:
// every session expires).
type Session struct {
	ID             string    `json:"id"`
	KeyID          string    `json:"key_id"`
	Org            string    `json:"org"`
	Workspace      string    `json:"workspace"`
	User           string    `json:"user"`
	Model          string    `json:"model"`
	IdempotencyKey string    `json:"-"`
	CreatedAt      time.Time `json:"created_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	ClosedAt       time.Time `json:"closed_at,omitzero"`
	MaxTurns       int64     `json:"max_turns"`
	MaxTokens      int64     `json:"max_tokens"`
	MaxCost        int64     `json:"max_cost_micros"`
	MaxContext     int64     `json:"max_context_tokens"`
	Turns          int64     `json:"turns"`
	Tokens         int64     `json:"tokens"`
	Cost           int64     `json:"cost_micros"`
	// Ceiling names the ceiling that first refused a call: "wall_clock",
	// "turns", "tokens", "cost" or "context"; empty while none has.
	Ceiling string `json:"ceiling,omitempty"`
}

// Open reports whether the session may still be charged at now.
func (s *Session) Open(now time.Time) bool { return s.ClosedAt.IsZero() && now.Before(s.ExpiresAt) }

// Session errors, usable with errors.Is.
var (
	// ErrUnknownSession: no session has that ID for that key.
	ErrUnknownSession = errors.New("unknown session")
	// ErrSessionClosed: the session was closed (DELETE).
	ErrSessionClosed = errors.New("session closed")
	// ErrTooManySessions: the user already has the most open sessions
	// allowed.
	ErrTooManySessions = errors.New("too many open sessions")
)

// CeilingError is a call refused by one of its session's ceilings.
type CeilingError struct {
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

func (e *CeilingError) Error() string {
	if e.Ceiling == "cost" {
		return fmt.Sprintf("session %s: cost ceiling reached (%s of %s used)", e.Session.ID, dollars.Money(e.Used), dollars.Money(e.Limit))
	}
	return fmt.Sprintf("session %s: %s ceiling reached (%d of %d used)", e.Session.ID, e.Ceiling, e.Used, e.Limit)
}

const sessionColumns = `id, key_id, org, workspace, user_id, model, idempotency_key, created_at, expires_at, closed_at,
	max_turns, max_tokens, max_cost, max_context, turns, tokens, cost, ceiling`

// newSessionID returns "sess_" and 26 base32 characters (128 random bits).
func newSessionID() string {
	var b [16]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program first)
	return "sess_" + keyIDEncoding.EncodeToString(b[:])
}

// OpenSession mints s for its key (KeyID, Org, Workspace, User, Model,
// ExpiresAt and the ceilings set by the caller; ID and CreatedAt by the
// catalog). With an IdempotencyKey that the key already used, the session
// minted then is returned instead, and created is false. maxOpen > 0 caps
// the open sessions of the user (ErrTooManySessions).
func (c *Catalog) OpenSession(ctx context.Context, s Session, maxOpen int) (out Session, created bool, err error) {
	now := c.now().UTC().Round(0)
	switch {
	case s.KeyID == "" || s.Workspace == "" || s.User == "":
		return Session{}, false, fmt.Errorf("catalog: open session: %w: key, workspace and user are required", ErrInvalid)
	case s.Model == "":
		return Session{}, false, fmt.Errorf("catalog: open session: %w: model is required", ErrInvalid)
	case !s.ExpiresAt.After(now):
		return Session{}, false, fmt.Errorf("catalog: open session: %w: expiry is not in the future", ErrInvalid)
	case s.MaxTurns < 0 || s.MaxTokens < 0 || s.MaxCost < 0 || s.MaxContext < 0:
		return Session{}, false, fmt.Errorf("catalog: open session: %w: negative ceiling", ErrInvalid)
	}
	if s.Org == "" {
		s.Org = "default"
	}
	s.ID = newSessionID()
	s.CreatedAt = now
	s.ExpiresAt = s.ExpiresAt.UTC().Round(0)
	s.ClosedAt, s.Turns, s.Tokens, s.Cost, s.Ceiling = time.Time{}, 0, 0, 0, ""
	err = c.inTx(ctx, func(tx *sql.Tx) error {
		if c.d.subjectLock != "" {
			if _, err := tx.ExecContext(ctx, c.d.q(c.d.subjectLock), "session/"+s.Workspace+"/"+s.User); err != nil {
				return err
			}
		}
		if s.IdempotencyKey != "" {
			prev, err := scanSession(tx.QueryRowContext(ctx, c.d.q(`SELECT `+sessionColumns+` FROM sessions
				WHERE key_id = ? AND idempotency_key = ?`), s.KeyID, s.IdempotencyKey))
			if err == nil {
				out = prev
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		if maxOpen > 0 {
			var open int
			if err := tx.QueryRowContext(ctx, c.d.q(`SELECT COUNT(*) FROM sessions
				WHERE org = ? AND workspace = ? AND user_id = ? AND closed_at IS NULL AND expires_at > ?`),
				s.Org, s.Workspace, s.User, now.UnixNano()).Scan(&open); err != nil {
				return err
			}
			if open >= maxOpen {
				return ErrTooManySessions
			}
		}
		var idem any
		if s.IdempotencyKey != "" {
			idem = s.IdempotencyKey
		}
		if _, err := tx.ExecContext(ctx, c.d.q(`INSERT INTO sessions
			(id, key_id, org, workspace, user_id, model, idempotency_key, created_at, expires_at,
			 max_turns, max_tokens, max_cost, max_context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			s.ID, s.KeyID, s.Org, s.Workspace, s.User, s.Model, idem, dbTime(s.CreatedAt), dbTime(s.ExpiresAt),
			s.MaxTurns, s.MaxTokens, s.MaxCost, s.MaxContext); err != nil {
			return err
		}
		out, created = s, true
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrTooManySessions) {
			return Session{}, false, err
		}
		return Session{}, false, fmt.Errorf("catalog: open session: %w", err)
	}
	return out, created, nil
}

// GetSession returns the session id of the key keyID (ErrUnknownSession
// for another key's).
func (c *Catalog) GetSession(ctx context.Context, id, keyID string) (Session, error) {
	s, err := scanSession(c.db.QueryRowContext(ctx, c.d.q(`SELECT `+sessionColumns+` FROM sessions WHERE id = ? AND key_id = ?`), id, keyID))
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrUnknownSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("catalog: session: %w", err)
	}
	return s, nil
}

// ChargeSession charges one call to the session id of the key keyID: a
// turn, and tokens and cost reserved (its worst case), in one conditional
// UPDATE, so that the ceilings hold across replicas; input is the call's
// input tokens, held against the context ceiling. A call that would pass a
// ceiling is refused with a *CeilingError and charges nothing; a closed
// session gives ErrSessionClosed, an unknown one ErrUnknownSession.
// SettleSession later replaces the reservation with the usage.
func (c *Catalog) ChargeSession(ctx context.Context, id, keyID string, tokens, cost, input int64) (Session, error) {
	now := c.now()
	// One statement admits and returns the row (RETURNING: SQLite 3.35+
	// and PostgreSQL); only a refusal reads the row again, to say why.
	s, err := scanSession(c.db.QueryRowContext(ctx, c.d.q(`UPDATE sessions SET turns = turns + 1, tokens = tokens + ?, cost = cost + ?
		WHERE id = ? AND key_id = ? AND closed_at IS NULL AND expires_at > ?
		AND (max_context = 0 OR ? <= max_context)
		AND (max_turns = 0 OR turns + 1 <= max_turns)
		AND (max_tokens = 0 OR tokens + ? <= max_tokens)
		AND (max_cost = 0 OR cost + ? <= max_cost)
		RETURNING `+sessionColumns),
		tokens, cost, id, keyID, now.UnixNano(), input, tokens, cost))
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("catalog: charge session: %w", err)
	}
	if s, err = c.GetSession(ctx, id, keyID); err != nil {
		return s, err
	}
	// Refused: say why, and remember the first ceiling reached.
	var ce *CeilingError
	switch {
	case !s.ClosedAt.IsZero():
		return s, ErrSessionClosed
	case !now.Before(s.ExpiresAt):
		secs := int64(s.ExpiresAt.Sub(s.CreatedAt).Round(time.Second) / time.Second)
		ce = &CeilingError{Ceiling: "wall_clock", Limit: secs, Used: secs}
	case s.MaxContext > 0 && input > s.MaxContext:
		ce = &CeilingError{Ceiling: "context", Limit: s.MaxContext, Used: 0, Want: input}
	case s.MaxTurns > 0 && s.Turns+1 > s.MaxTurns:
		ce = &CeilingError{Ceiling: "turns", Limit: s.MaxTurns, Used: s.Turns, Want: 1}
	case s.MaxTokens > 0 && s.Tokens+tokens > s.MaxTokens:
		ce = &CeilingError{Ceiling: "tokens", Limit: s.MaxTokens, Used: s.Tokens, Want: tokens}
	case s.MaxCost > 0 && s.Cost+cost > s.MaxCost:
		ce = &CeilingError{Ceiling: "cost", Limit: s.MaxCost, Used: s.Cost, Want: cost}
	default:
		// The counters moved between the UPDATE and the read (another
		// call settled): the caller may try again.
		return s, fmt.Errorf("catalog: charge session: the session changed meanwhile; retry")
	}
	if s.Ceiling == "" {
		// Not after a close: a session ends once, by a close or by its
		// first ceiling (EndSession, CloseSession).
		res, err := c.db.ExecContext(ctx, c.d.q(`UPDATE sessions SET ceiling = ? WHERE id = ? AND ceiling IS NULL AND closed_at IS NULL`), ce.Ceiling, id)
		if err != nil {
			return s, fmt.Errorf("catalog: charge session: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			ce.First = true
			s.Ceiling = ce.Ceiling
		}
	}
	ce.Session = s
	return s, ce
}

// SettleSession replaces a call's reserved tokens and cost with what it
// used: the differences are added (negative for a refund, positive for an
// overrun, which is never capped). turnsDelta is -1 to give back the turn
// of a call the model never served.
func (c *Catalog) SettleSession(ctx context.Context, id string, turnsDelta, tokensDelta, costDelta int64) error {
	if turnsDelta == 0 && tokensDelta == 0 && costDelta == 0 {
		return nil
	}
	if _, err := c.db.ExecContext(ctx, c.d.q(`UPDATE sessions SET turns = turns + ?, tokens = tokens + ?, cost = cost + ? WHERE id = ?`),
		turnsDelta, tokensDelta, costDelta, id); err != nil {
		return fmt.Errorf("catalog: settle session: %w", err)
	}
	return nil
}

// CloseSession closes the session id of the key keyID: no call is charged
// to it any more. Closing a closed session returns it unchanged, with
// closed false.
func (c *Catalog) CloseSession(ctx context.Context, id, keyID string) (s Session, closed bool, err error) {
	res, err := c.db.ExecContext(ctx, c.d.q(`UPDATE sessions SET closed_at = ? WHERE id = ? AND key_id = ? AND closed_at IS NULL`),
		c.now().UnixNano(), id, keyID)
	if err != nil {
		return Session{}, false, fmt.Errorf("catalog: close session: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Session{}, false, fmt.Errorf("catalog: close session: %w", err)
	}
	s, err = c.GetSession(ctx, id, keyID)
	return s, n == 1 && err == nil, err
}

// ListSessions returns up to limit sessions, newest first: of workspace
// (all when empty), open ones only when open is set.
func (c *Catalog) ListSessions(ctx context.Context, workspace string, open bool, limit int) ([]Session, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	q := `SELECT ` + sessionColumns + ` FROM sessions WHERE (? = '' OR workspace = ?)`
	args := []any{workspace, workspace}
	if open {
		q += ` AND closed_at IS NULL AND expires_at > ?`
		args = append(args, c.now().UnixNano())
	}
	q += ` ORDER BY created_at DESC, id LIMIT ?`
	args = append(args, limit)
	rows, err := c.db.QueryContext(ctx, c.d.q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: list sessions: %w", err)
	}
	defer rows.Close()
	out := []Session{}
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("catalog: list sessions: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: list sessions: %w", err)
	}
	return out, nil
}

// EndSession closes session id for an operator (actor), whatever key it
// belongs to, and audits it: the kill switch of a runaway session.
// Closing a closed session changes nothing and audits nothing, and closed
// is false.
func (c *Catalog) EndSession(ctx context.Context, id, actor string) (_ Session, closed bool, _ error) {
	if actor == "" {
		return Session{}, false, fmt.Errorf("catalog: end session: %w: actor is required", ErrInvalid)
	}
	now := c.now()
	var out Session
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		before, err := scanSession(tx.QueryRowContext(ctx, c.d.q(`SELECT `+sessionColumns+` FROM sessions WHERE id = ?`), id))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrUnknownSession
		}
		if err != nil {
			return err
		}
		out = before
		if !before.ClosedAt.IsZero() {
			return nil
		}
		out.ClosedAt = now.UTC().Round(0)
		if _, err := tx.ExecContext(ctx, c.d.q(`UPDATE sessions SET closed_at = ? WHERE id = ?`), dbTime(out.ClosedAt), id); err != nil {
			return err
		}
		closed = true
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionSessionClose, Target: "session/" + id,
			Before: before, After: out, Workspace: before.Workspace, Org: before.Org}, now)
	})
	if err != nil {
		if errors.Is(err, ErrUnknownSession) {
			return Session{}, false, err
		}
		return Session{}, false, fmt.Errorf("catalog: end session: %w", err)
	}
	return out, closed, nil
}

// EndExpiredSessions marks the open sessions whose wall clock has passed
// and that no ceiling has ended yet as ended by the wall clock (Ceiling
// "wall_clock"), and returns them: what they used is then known, however
// they ended, without waiting for a call that will never come. Each
// session is returned once, by whichever replica marks it.
func (c *Catalog) EndExpiredSessions(ctx context.Context) ([]Session, error) {
	rows, err := c.db.QueryContext(ctx, c.d.q(`UPDATE sessions SET ceiling = 'wall_clock'
		WHERE ceiling IS NULL AND closed_at IS NULL AND expires_at <= ?
		RETURNING `+sessionColumns), c.now().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("catalog: end expired sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("catalog: end expired sessions: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: end expired sessions: %w", err)
	}
	return out, nil
}

// rowScanner is a *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

func scanSession(row rowScanner) (Session, error) {
	var s Session
	var idem, ceiling sql.NullString
	var created, expires, closed sql.NullInt64
	err := row.Scan(&s.ID, &s.KeyID, &s.Org, &s.Workspace, &s.User, &s.Model, &idem, &created, &expires, &closed,
		&s.MaxTurns, &s.MaxTokens, &s.MaxCost, &s.MaxContext, &s.Turns, &s.Tokens, &s.Cost, &ceiling)
	if err != nil {
		return Session{}, err
	}
	s.IdempotencyKey, s.Ceiling = idem.String, ceiling.String
	s.CreatedAt, s.ExpiresAt, s.ClosedAt = fromDBTime(created), fromDBTime(expires), fromDBTime(closed)
	return s, nil
}
