package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// AuditEntry is one record of the audit log: who did what to what, with the
// state before and after. The catalog writes one for each change it makes;
// callers add their own (a refused admin request, a rule edited elsewhere)
// with Audit.
type AuditEntry struct {
	// ID orders entries; set by the catalog.
	ID int64 `json:"id"`
	// At is when it happened; Audit sets it to now when zero.
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Target string    `json:"target,omitempty"`
	// Before and After are stored as JSON. ListAudit returns them as
	// json.RawMessage, or nil when absent. Never put a secret in them.
	Before any `json:"before,omitempty"`
	After  any `json:"after,omitempty"`
	// Denied records an attempt that was refused.
	Denied bool `json:"denied,omitempty"`
	// Workspace is the workspace the change concerns, when there is one: a
	// viewer scoped to workspaces reads the entries of those only.
	Workspace string `json:"workspace,omitempty"`
	// Org is the org of Workspace ("default" when it names none).
	Org string `json:"org,omitempty"`
}

// AuditQuery selects audit entries. Empty fields do not filter.
type AuditQuery struct {
	Actor  string
	Action string
	Target string
	// Workspaces keeps the entries of these workspaces; empty keeps all.
	Workspaces []string
	// Org keeps the entries of that org's workspaces; empty keeps all.
	Org string
	// Since keeps entries at or after this instant.
	Since time.Time
	// BeforeID keeps entries with a smaller ID: pass the last ID of a page
	// to get the next one.
	BeforeID int64
	// Limit caps the number of entries; zero means 100.
	Limit int
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Audit appends e to the audit log. Actor and Action are required.
func (c *Catalog) Audit(ctx context.Context, e AuditEntry) error {
	if e.Actor == "" || e.Action == "" {
		return fmt.Errorf("catalog: audit: %w: actor and action are required", ErrInvalid)
	}
	if err := c.insertAudit(ctx, c.db, e, c.now()); err != nil {
		return fmt.Errorf("catalog: audit: %w", err)
	}
	return nil
}

// insertAudit writes e through ex (the transaction of the change it
// records), stamped now unless e.At is set.
func (c *Catalog) insertAudit(ctx context.Context, ex execer, e AuditEntry, now time.Time) error {
	if e.At.IsZero() {
		e.At = now
	}
	before, err := auditJSON(e.Before)
	if err != nil {
		return fmt.Errorf("encode before: %w", err)
	}
	after, err := auditJSON(e.After)
	if err != nil {
		return fmt.Errorf("encode after: %w", err)
	}
	if e.Workspace != "" && e.Org == "" {
		e.Org = "default"
	}
	_, err = ex.ExecContext(ctx, c.d.q(`INSERT INTO audit_log (at, actor, action, target, before, after, denied, workspace, org) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		e.At.UnixNano(), e.Actor, e.Action, e.Target, before, after, e.Denied, e.Workspace, e.Org)
	return err
}

// auditJSON encodes v for a nullable JSON column: nil (or JSON null) is
// NULL.
func auditJSON(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return nil, nil
	}
	return string(b), nil
}

// ListAudit returns the entries q selects, newest first.
func (c *Catalog) ListAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	query := `SELECT id, at, actor, action, target, before, after, denied, workspace, org FROM audit_log WHERE 1=1`
	var args []any
	for _, f := range []struct {
		column, value string
	}{{"actor", q.Actor}, {"action", q.Action}, {"target", q.Target}} {
		if f.value != "" {
			query += ` AND ` + f.column + ` = ?`
			args = append(args, f.value)
		}
	}
	if q.Org != "" {
		query += ` AND org = ?`
		args = append(args, q.Org)
	}
	if len(q.Workspaces) > 0 {
		query += ` AND workspace IN (?` + strings.Repeat(`, ?`, len(q.Workspaces)-1) + `)`
		for _, w := range q.Workspaces {
			args = append(args, w)
		}
	}
	if !q.Since.IsZero() {
		query += ` AND at >= ?`
		args = append(args, q.Since.UnixNano())
	}
	if q.BeforeID > 0 {
		query += ` AND id < ?`
		args = append(args, q.BeforeID)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	query += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := c.db.QueryContext(ctx, c.d.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: list audit: %w", err)
	}
	defer rows.Close()
	var entries []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var before, after sql.NullString
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.Target, &before, &after, &e.Denied, &e.Workspace, &e.Org); err != nil {
			return nil, fmt.Errorf("catalog: list audit: %w", err)
		}
		e.At = time.Unix(0, at).UTC()
		if before.Valid {
			e.Before = json.RawMessage(before.String)
		}
		if after.Valid {
			e.After = json.RawMessage(after.String)
		}
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: list audit: %w", err)
	}
	return entries, nil
}
