package catalog

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Roles of admin tokens.
const (
	// RoleAdmin may read and change everything.
	RoleAdmin = "admin"
	// RoleViewer may read the workspaces it is scoped to, and change
	// nothing.
	RoleViewer = "viewer"
)

// Audit actions for admin tokens.
const (
	ActionTokenCreate = "token.create"
	ActionTokenRevoke = "token.revoke"
)

// AdminToken is an admin API token's record. It never holds the secret or
// its hash.
type AdminToken struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Role is RoleAdmin or RoleViewer.
	Role string `json:"role"`
	// Workspaces are the workspaces a viewer may read; an admin token has
	// none (it reads everything).
	Workspaces []string `json:"workspaces,omitempty"`
	// Org is the org of a viewer's workspaces, and the one org whose
	// stored rules it reads; empty means "default". An admin token has none.
	Org       string    `json:"org,omitempty"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// An admin token secret is "sluice-adm-" + ID + "-" + 43 base62 characters,
// shaped like an API key's so that the same parser and hash serve both;
// the distinct prefix keeps one from being mistaken for the other.
const adminSecretPrefix = "sluice-adm-"

func tokenTarget(id string) string { return "token/" + id }

// CreateAdminToken creates an admin API token and returns its secret, the
// only time it exists outside the caller. Role is required; a viewer needs
// at least one workspace and an admin takes none. Created by actor, and
// audited.
func (c *Catalog) CreateAdminToken(ctx context.Context, t AdminToken, actor string) (secret string, created AdminToken, err error) {
	now := c.now()
	switch {
	case actor == "":
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w: actor is required", ErrInvalid)
	case t.Role != RoleAdmin && t.Role != RoleViewer:
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w: role must be %q or %q, not %q", ErrInvalid, RoleAdmin, RoleViewer, t.Role)
	case t.Role == RoleViewer && len(t.Workspaces) == 0:
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w: a viewer token needs the workspaces it may read", ErrInvalid)
	case t.Role == RoleAdmin && len(t.Workspaces) > 0:
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w: an admin token reads every workspace; give workspaces to viewer tokens only", ErrInvalid)
	case t.Role == RoleAdmin && t.Org != "":
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w: an admin token manages every org; give an org to viewer tokens only", ErrInvalid)
	case slices.Contains(t.Workspaces, ""):
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w: a workspace name is empty", ErrInvalid)
	case !t.ExpiresAt.IsZero() && !t.ExpiresAt.After(now):
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w: expiry %s is not in the future", ErrInvalid, t.ExpiresAt.Format(time.RFC3339))
	}
	if err := checkValue("org", t.Org); err != nil {
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w: %v", ErrInvalid, err)
	}
	if t.Role == RoleViewer && t.Org == "" {
		t.Org = "default"
	}
	t.ID = newKeyID()
	t.CreatedBy = actor
	t.CreatedAt = now.UTC().Round(0)
	t.ExpiresAt = t.ExpiresAt.UTC().Round(0)
	t.RevokedAt = time.Time{}
	t.Workspaces = slices.Clone(t.Workspaces)
	slices.Sort(t.Workspaces)
	t.Workspaces = slices.Compact(t.Workspaces)
	ws, err := json.Marshal(nonNil(t.Workspaces))
	if err != nil {
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w", err)
	}
	secret = adminSecretPrefix + strings.TrimPrefix(newSecret(t.ID), secretPrefix)
	hash := sha256.Sum256([]byte(secret))
	err = c.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, c.d.q(`INSERT INTO admin_tokens
			(id, secret_hash, name, role, workspaces, org, created_by, created_at, expires_at, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)`),
			t.ID, hash[:], t.Name, t.Role, string(ws), t.Org, t.CreatedBy, dbTime(t.CreatedAt), dbTime(t.ExpiresAt)); err != nil {
			return err
		}
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionTokenCreate, Target: tokenTarget(t.ID), After: t}, now)
	})
	if err != nil {
		return "", AdminToken{}, fmt.Errorf("catalog: create admin token: %w", err)
	}
	return secret, t, nil
}

// AuthenticateAdminToken returns the token a secret belongs to. It refuses
// with ErrUnknownToken (malformed, no such token, or wrong secret),
// ErrRevokedToken or ErrExpiredToken.
func (c *Catalog) AuthenticateAdminToken(ctx context.Context, secret string) (AdminToken, error) {
	if !strings.HasPrefix(secret, adminSecretPrefix) {
		return AdminToken{}, ErrUnknownToken
	}
	id, ok := parseSecret(secretPrefix + strings.TrimPrefix(secret, adminSecretPrefix))
	if !ok {
		return AdminToken{}, ErrUnknownToken
	}
	hash := sha256.Sum256([]byte(secret))
	t, stored, err := c.loadToken(ctx, c.db, id, true)
	if errors.Is(err, sql.ErrNoRows) {
		return AdminToken{}, ErrUnknownToken
	}
	if err != nil {
		return AdminToken{}, fmt.Errorf("catalog: authenticate admin token: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, hash[:]) != 1 {
		return AdminToken{}, ErrUnknownToken
	}
	if !t.RevokedAt.IsZero() {
		return AdminToken{}, ErrRevokedToken
	}
	if !t.ExpiresAt.IsZero() && !c.now().Before(t.ExpiresAt) {
		return AdminToken{}, ErrExpiredToken
	}
	return t, nil
}

const tokenColumns = `id, name, role, workspaces, org, created_by, created_at, expires_at, revoked_at`

func (c *Catalog) loadToken(ctx context.Context, q queryer, id string, withHash bool) (AdminToken, []byte, error) {
	cols := tokenColumns
	if withHash {
		cols += ", secret_hash"
	}
	var hash []byte
	t, err := scanToken(q.QueryRowContext(ctx, c.d.q(`SELECT `+cols+` FROM admin_tokens WHERE id = ?`), id).Scan, &hash, withHash)
	return t, hash, err
}

func scanToken(scan func(...any) error, hash *[]byte, withHash bool) (AdminToken, error) {
	var t AdminToken
	var ws string
	var created, expires, revoked sql.NullInt64
	dest := []any{&t.ID, &t.Name, &t.Role, &ws, &t.Org, &t.CreatedBy, &created, &expires, &revoked}
	if withHash {
		dest = append(dest, hash)
	}
	if err := scan(dest...); err != nil {
		return AdminToken{}, err
	}
	if ws != "" && ws != "[]" {
		if err := json.Unmarshal([]byte(ws), &t.Workspaces); err != nil {
			return AdminToken{}, fmt.Errorf("admin token %s: workspaces: %w", t.ID, err)
		}
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = fromDBTime(created), fromDBTime(expires), fromDBTime(revoked)
	if t.Role == RoleViewer && t.Org == "" {
		// A viewer made before tokens had an org reads the default org.
		t.Org = "default"
	}
	return t, nil
}

// ListAdminTokens returns every admin token, revoked ones included, oldest
// first.
func (c *Catalog) ListAdminTokens(ctx context.Context) ([]AdminToken, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT `+tokenColumns+` FROM admin_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("catalog: list admin tokens: %w", err)
	}
	defer rows.Close()
	var out []AdminToken
	for rows.Next() {
		t, err := scanToken(rows.Scan, nil, false)
		if err != nil {
			return nil, fmt.Errorf("catalog: list admin tokens: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: list admin tokens: %w", err)
	}
	return out, nil
}

// RevokeAdminToken revokes an admin token for good, audited. It stops
// working at once. Revoking a revoked token changes nothing.
func (c *Catalog) RevokeAdminToken(ctx context.Context, id, actor string) error {
	if actor == "" {
		return fmt.Errorf("catalog: revoke admin token: %w: actor is required", ErrInvalid)
	}
	now := c.now()
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		before, _, err := c.loadToken(ctx, tx, id, false)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrUnknownToken
		}
		if err != nil {
			return err
		}
		if !before.RevokedAt.IsZero() {
			return nil
		}
		after := before
		after.RevokedAt = now.UTC().Round(0)
		if _, err := tx.ExecContext(ctx, c.d.q(`UPDATE admin_tokens SET revoked_at = ? WHERE id = ?`), dbTime(after.RevokedAt), id); err != nil {
			return err
		}
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionTokenRevoke, Target: tokenTarget(id), Before: before, After: after}, now)
	})
	if err != nil {
		return fmt.Errorf("catalog: revoke admin token %s: %w", id, err)
	}
	return nil
}
