// Package catalogsessions serves the gateway's sessions from the catalog:
// the adapter between catalog.Session and gateway.Session, and between their
// errors, that cmd/sluice wires in (and the gateway's tests use). It keeps
// the gateway free of the catalog's database drivers.
package catalogsessions

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway"
)

// Store is a gateway.SessionStore over a catalog's sessions. It is safe for
// concurrent use, as the catalog is.
type Store struct {
	Catalog *catalog.Catalog
}

var _ gateway.SessionStore = Store{}

// OpenSession implements gateway.SessionStore.
func (s Store) OpenSession(ctx context.Context, session gateway.Session, maxOpen int) (gateway.Session, bool, error) {
	out, created, err := s.Catalog.OpenSession(ctx, toCatalog(session), maxOpen)
	return fromCatalog(out), created, storeError(err)
}

// GetSession implements gateway.SessionStore.
func (s Store) GetSession(ctx context.Context, id, keyID string) (gateway.Session, error) {
	out, err := s.Catalog.GetSession(ctx, id, keyID)
	return fromCatalog(out), storeError(err)
}

// ChargeSession implements gateway.SessionStore.
func (s Store) ChargeSession(ctx context.Context, id, keyID string, tokens, cost, input int64) (gateway.Session, error) {
	out, err := s.Catalog.ChargeSession(ctx, id, keyID, tokens, cost, input)
	return fromCatalog(out), storeError(err)
}

// SettleSession implements gateway.SessionStore.
func (s Store) SettleSession(ctx context.Context, id string, turns, tokens, cost int64) error {
	return storeError(s.Catalog.SettleSession(ctx, id, turns, tokens, cost))
}

// CloseSession implements gateway.SessionStore.
func (s Store) CloseSession(ctx context.Context, id, keyID string) (gateway.Session, bool, error) {
	out, closed, err := s.Catalog.CloseSession(ctx, id, keyID)
	return fromCatalog(out), closed, storeError(err)
}

func toCatalog(s gateway.Session) catalog.Session {
	return catalog.Session{ID: s.ID, KeyID: s.KeyID, Org: s.Org, Workspace: s.Workspace, User: s.User, Model: s.Model,
		IdempotencyKey: s.IdempotencyKey, CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt, ClosedAt: s.ClosedAt,
		MaxTurns: s.MaxTurns, MaxTokens: s.MaxTokens, MaxCost: s.MaxCost, MaxContext: s.MaxContext,
		Turns: s.Turns, Tokens: s.Tokens, Cost: s.Cost, Ceiling: s.Ceiling}
}

func fromCatalog(s catalog.Session) gateway.Session {
	return gateway.Session{ID: s.ID, KeyID: s.KeyID, Org: s.Org, Workspace: s.Workspace, User: s.User, Model: s.Model,
		IdempotencyKey: s.IdempotencyKey, CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt, ClosedAt: s.ClosedAt,
		MaxTurns: s.MaxTurns, MaxTokens: s.MaxTokens, MaxCost: s.MaxCost, MaxContext: s.MaxContext,
		Turns: s.Turns, Tokens: s.Tokens, Cost: s.Cost, Ceiling: s.Ceiling}
}

// storeError gives a catalog error the gateway's meaning as well, keeping
// the catalog's error (its text, shown to clients for ErrInvalidSession, and
// its identity).
func storeError(err error) error {
	if err == nil {
		return nil
	}
	var kind error
	var ce *catalog.CeilingError
	switch {
	case errors.As(err, &ce):
		kind = &gateway.SessionCeilingError{Ceiling: ce.Ceiling, Limit: ce.Limit, Used: ce.Used, Want: ce.Want,
			Session: fromCatalog(ce.Session), First: ce.First}
	case errors.Is(err, catalog.ErrUnknownSession):
		kind = gateway.ErrUnknownSession
	case errors.Is(err, catalog.ErrSessionClosed):
		kind = gateway.ErrSessionClosed
	case errors.Is(err, catalog.ErrTooManySessions):
		kind = gateway.ErrTooManySessions
	case errors.Is(err, catalog.ErrInvalid):
		kind = gateway.ErrInvalidSession
	default:
		return err
	}
	return &classified{kind: kind, err: err}
}

// classified is a catalog error that is also one of the gateway's.
type classified struct {
	kind, err error
}

func (e *classified) Error() string   { return e.err.Error() }
func (e *classified) Unwrap() []error { return []error{e.kind, e.err} }
