package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
)

// Override is a stored per-subject limit override, the catalog's form of
// sluice.Override: it changes rule Rule for every request whose identity
// has Attribute equal to Value. A nil Limit or Burst inherits the rule's
// value; 0 disables the rule for that subject. A non-zero ExpiresAt ends
// it.
type Override struct {
	Rule string `json:"rule"`
	// Org is the org of a workspace, team or user Value: empty means
	// "default". It is empty for the other attributes, whose values do not
	// belong to an org (a key's ID is unique on its own).
	Org       string    `json:"org,omitempty"`
	Attribute string    `json:"attribute"`
	Value     string    `json:"value"`
	Limit     *int64    `json:"limit"`
	Burst     *int64    `json:"burst"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Sluice returns o as the engine's Override.
func (o Override) Sluice() sluice.Override {
	return sluice.Override{
		Rule:      o.Rule,
		Org:       o.Org,
		Attribute: o.Attribute,
		Value:     o.Value,
		Limit:     clonePtr(o.Limit),
		Burst:     clonePtr(o.Burst),
		ExpiresAt: o.ExpiresAt,
	}
}

func clonePtr(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// overrideAttributes are the identity attributes an override may key on,
// as the engine accepts them.
var overrideAttributes = []string{"org", "workspace", "team", "user", "key", "session", "ip"}

// inOrg reports whether values of attribute belong to an org.
func inOrg(attribute string) bool {
	return attribute == "workspace" || attribute == "team" || attribute == "user"
}

// Normalized returns o with the org its attribute's values are stored
// with: "default" for a workspace, team or user that names none, empty for
// the other attributes.
func (o Override) Normalized() Override {
	o.normalize()
	return o
}

// normalize gives o the org its attribute's values are stored with.
func (o *Override) normalize() {
	switch {
	case !inOrg(o.Attribute):
		o.Org = ""
	case o.Org == "":
		o.Org = "default"
	}
}

func overrideTarget(o Override) string {
	if o.Org != "" && o.Org != "default" {
		return "override/" + o.Rule + "/" + o.Org + "/" + o.Attribute + "/" + o.Value
	}
	return "override/" + o.Rule + "/" + o.Attribute + "/" + o.Value
}

// SetOverride creates or replaces the override for (o.Rule, o.Org,
// o.Attribute, o.Value), audited as done by actor with the previous override, if any.
// The rule is not checked against the live policy: rules may come from
// the config file, which the catalog does not see.
func (c *Catalog) SetOverride(ctx context.Context, o Override, actor string) error {
	return c.setOverride(ctx, o, actor, false)
}

// SetSubjectOverride is SetOverride for a subject that must exist: an org,
// workspace, team or user that some key carries, or a key's ID. It returns
// ErrUnknownSubject, and changes nothing, when none does. The check and the
// change are one transaction.
func (c *Catalog) SetSubjectOverride(ctx context.Context, o Override, actor string) error {
	return c.setOverride(ctx, o, actor, true)
}

func (c *Catalog) setOverride(ctx context.Context, o Override, actor string, requireSubject bool) error {
	switch {
	case o.Rule == "" || o.Value == "":
		return fmt.Errorf("catalog: set override: %w: rule and value are required", ErrInvalid)
	case !slices.Contains(overrideAttributes, o.Attribute):
		return fmt.Errorf("catalog: set override: %w: attribute %q must be one of org, workspace, team, user, key, session, ip", ErrInvalid, o.Attribute)
	case (o.Limit != nil && *o.Limit < 0) || (o.Burst != nil && *o.Burst < 0):
		return fmt.Errorf("catalog: set override: %w: limits must not be negative", ErrInvalid)
	case actor == "":
		return fmt.Errorf("catalog: set override: %w: actor is required", ErrInvalid)
	case requireSubject && subjectColumn(o.Attribute) == "":
		return fmt.Errorf("catalog: set override: %w: a %s cannot be checked against the keys; use org, workspace, team, user or key", ErrInvalid, o.Attribute)
	}
	now := c.now()
	o.normalize()
	o.Limit, o.Burst = clonePtr(o.Limit), clonePtr(o.Burst)
	o.ExpiresAt = o.ExpiresAt.UTC().Round(0)
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		org, workspace, err := c.subjectWorkspace(ctx, tx, o.Org, o.Attribute, o.Value)
		if requireSubject && errors.Is(err, sql.ErrNoRows) && inOrg(o.Attribute) {
			// A workspace, user or team no key records may still be one a
			// service key of the org asserts.
			asserted, aerr := c.assertable(ctx, tx, o.Org, o.Attribute, o.Value)
			if aerr != nil {
				return aerr
			}
			if asserted {
				org, err = o.Org, nil
				if o.Attribute == "workspace" {
					workspace = o.Value
				}
			}
		}
		if requireSubject && errors.Is(err, sql.ErrNoRows) {
			if inOrg(o.Attribute) {
				return fmt.Errorf("%w: no key of org %q has %s %q", ErrUnknownSubject, o.Org, o.Attribute, o.Value)
			}
			return fmt.Errorf("%w: no key has %s %q", ErrUnknownSubject, o.Attribute, o.Value)
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		before, err := c.loadOverride(ctx, tx, o)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.ExecContext(ctx, c.d.q(`INSERT INTO overrides (rule, org, attribute, value, limit_value, burst, expires_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (rule, org, attribute, value) DO UPDATE SET
				limit_value = excluded.limit_value, burst = excluded.burst,
				expires_at = excluded.expires_at, updated_at = excluded.updated_at`),
			o.Rule, o.Org, o.Attribute, o.Value, dbInt(o.Limit), dbInt(o.Burst), dbTime(o.ExpiresAt), now.UnixNano()); err != nil {
			return err
		}
		e := AuditEntry{Actor: actor, Action: ActionOverrideSet, Target: overrideTarget(o), After: o, Workspace: workspace, Org: org}
		if before != nil {
			e.Before = before
		}
		return c.insertAudit(ctx, tx, e, now)
	})
	if err != nil {
		return fmt.Errorf("catalog: set override: %w", err)
	}
	return nil
}

// assertable reports whether a live service key of org may assert value
// as its attribute (workspace, user or team).
func (c *Catalog) assertable(ctx context.Context, q queryer, org, attribute, value string) (bool, error) {
	rows, err := q.QueryContext(ctx, c.d.q(`SELECT `+keyColumns+` FROM api_keys WHERE org = ? AND may_assert <> '[]' AND revoked_at IS NULL`), org)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		k, err := scanKey(rows.Scan, nil, false)
		if err != nil {
			return false, err
		}
		if attribute == AssertWorkspace && k.MayAssertWorkspace(value) || attribute != AssertWorkspace && k.MayAssert(attribute) {
			return true, nil
		}
	}
	return false, rows.Err()
}

// subjectColumn is the api_keys column an override attribute is checked
// against; "" for attributes no key records (session, ip).
func subjectColumn(attribute string) string {
	switch attribute {
	case "org", "workspace", "team":
		return attribute
	case "user":
		return "user_id"
	case "key":
		return "id"
	}
	return ""
}

// subjectWorkspace returns the workspace an override subject belongs to,
// and its org, for the audit log: the value of a workspace, the workspace
// of a key, "" for subjects that span workspaces. It is sql.ErrNoRows when
// no key carries the subject: for a workspace, team or user, no key of
// org (any org when org is empty).
func (c *Catalog) subjectWorkspace(ctx context.Context, q queryer, org, attribute, value string) (keyOrg, workspace string, err error) {
	col := subjectColumn(attribute)
	if col == "" {
		return "", "", sql.ErrNoRows
	}
	query, args := `SELECT org, workspace FROM api_keys WHERE `+col+` = ?`, []any{value}
	if org != "" && inOrg(attribute) {
		query, args = query+` AND org = ?`, append(args, org)
	}
	if err := q.QueryRowContext(ctx, c.d.q(query+` LIMIT 1`), args...).Scan(&keyOrg, &workspace); err != nil {
		return "", "", err
	}
	if attribute != "workspace" && attribute != "key" {
		return "", "", nil
	}
	return keyOrg, workspace, nil
}

// SubjectExists reports whether some key, of any org, carries the
// subject: an org, workspace, team or user value, or a key ID.
func (c *Catalog) SubjectExists(ctx context.Context, attribute, value string) (bool, error) {
	if subjectColumn(attribute) == "" {
		return false, fmt.Errorf("catalog: subject exists: %w: attribute %q is not recorded on keys", ErrInvalid, attribute)
	}
	_, _, err := c.subjectWorkspace(ctx, c.db, "", attribute, value)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("catalog: subject exists: %w", err)
	}
	return true, nil
}

// DeleteOverride removes the override of (o.Rule, o.Org, o.Attribute,
// o.Value), audited as done by actor. It returns ErrUnknownOverride when
// there is none.
func (c *Catalog) DeleteOverride(ctx context.Context, o Override, actor string) error {
	if actor == "" {
		return fmt.Errorf("catalog: delete override: %w: actor is required", ErrInvalid)
	}
	o.normalize()
	now := c.now()
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		before, err := c.loadOverride(ctx, tx, o)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrUnknownOverride
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, c.d.q(`DELETE FROM overrides WHERE rule = ? AND org = ? AND attribute = ? AND value = ?`),
			o.Rule, o.Org, o.Attribute, o.Value); err != nil {
			return err
		}
		org, workspace, err := c.subjectWorkspace(ctx, tx, o.Org, o.Attribute, o.Value)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionOverrideDelete, Target: overrideTarget(o), Before: before, Workspace: workspace, Org: org}, now)
	})
	if err != nil {
		return fmt.Errorf("catalog: delete override: %w", err)
	}
	return nil
}

const overrideColumns = `rule, org, attribute, value, limit_value, burst, expires_at`

// loadOverride loads the override of (o.Rule, o.Org, o.Attribute, o.Value);
// o is normalized.
func (c *Catalog) loadOverride(ctx context.Context, q queryer, o Override) (*Override, error) {
	row := q.QueryRowContext(ctx, c.d.q(`SELECT `+overrideColumns+` FROM overrides WHERE rule = ? AND org = ? AND attribute = ? AND value = ?`),
		o.Rule, o.Org, o.Attribute, o.Value)
	o, err := scanOverride(row.Scan)
	if err != nil {
		return nil, err
	}
	return &o, nil
}

func scanOverride(scan func(...any) error) (Override, error) {
	var o Override
	var limit, burst, expires sql.NullInt64
	if err := scan(&o.Rule, &o.Org, &o.Attribute, &o.Value, &limit, &burst, &expires); err != nil {
		return Override{}, err
	}
	o.Limit, o.Burst, o.ExpiresAt = fromDBInt(limit), fromDBInt(burst), fromDBTime(expires)
	return o, nil
}

// ListOverrides returns every stored override, expired ones included (the
// engine ignores those), ordered by rule, org, attribute and value.
func (c *Catalog) ListOverrides(ctx context.Context) ([]Override, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT `+overrideColumns+` FROM overrides ORDER BY rule, org, attribute, value`)
	if err != nil {
		return nil, fmt.Errorf("catalog: list overrides: %w", err)
	}
	defer rows.Close()
	var out []Override
	for rows.Next() {
		o, err := scanOverride(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("catalog: list overrides: %w", err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: list overrides: %w", err)
	}
	return out, nil
}
