package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/names"
)

// MaxRulesPerOrg bounds the rules stored for one org (and the deployment
// rules, stored with no org).
const MaxRulesPerOrg = 200

// Audit actions for stored rules.
const (
	ActionRuleCreate = "rule.create"
	ActionRuleUpdate = "rule.update"
	ActionRuleDelete = "rule.delete"
)

// Rule is a rule stored in the catalog: the database layer of the policy,
// after the defaults, the config file and the environment. A stored rule
// replaces a rule of the same name and org from an earlier layer. The
// catalog adds only its timestamps to sluice.Rule; its JSON, which the
// rules table stores as the rule's definition, is sluice.RuleJSON with
// created_at and updated_at.
//
// Org owns the rule: it applies to that org's keys only, and replaces there
// a deployment rule of the same name. Empty makes it a deployment rule,
// applied in every org. Names are unique within an org; at most
// MaxRulesPerOrg rules are stored per org.
type Rule struct {
	sluice.Rule
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ruleDefinition is a Rule's JSON. Rule cannot take its fields' tags: the
// embedded sluice.Rule's JSON methods would write it without them.
type ruleDefinition struct {
	sluice.RuleJSON
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// MarshalJSON writes r as the rules table stores it.
func (r Rule) MarshalJSON() ([]byte, error) {
	return json.Marshal(ruleDefinition{r.JSON(), r.CreatedAt, r.UpdatedAt})
}

// UnmarshalJSON reads a rule's stored definition.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var s ruleDefinition
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*r = Rule{s.Rule(), s.CreatedAt, s.UpdatedAt}
	return nil
}

// ruleTarget names a rule in the audit log.
func ruleTarget(org, name string) string {
	if org == "" {
		return "rule/" + name
	}
	return "rule/" + org + "/" + name
}

// errRuleOrg: a rule's body names an org other than the one it is stored
// under.
var errRuleOrg = errors.New("the rule's org differs from the org it is stored under")

// validateRule checks r as the engine would, so that a stored rule can
// always be compiled into a policy.
func validateRule(r *Rule) error {
	// An empty name is the engine's to refuse, below.
	if r.Name != "" {
		if err := names.Check(r.Name); err != nil {
			return fmt.Errorf("%w: rule name %v", ErrInvalid, err)
		}
	}
	if err := checkValue("org", r.Org); err != nil {
		return fmt.Errorf("%w: rule %q: %v", ErrInvalid, r.Name, err)
	}
	if err := r.Validate(); err != nil {
		var re *sluice.RuleError
		if errors.As(err, &re) {
			return fmt.Errorf("%w: rule %q: %s %s", ErrInvalid, re.Rule, re.Field, re.Message)
		}
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// CreateRule stores a new rule, audited as done by actor. It returns
// ErrRuleExists when the name is taken in the rule's org and
// ErrTooManyRules when the org already has MaxRulesPerOrg rules; the count
// and the insert are one transaction.
func (c *Catalog) CreateRule(ctx context.Context, r Rule, actor string) (Rule, error) {
	if actor == "" {
		return Rule{}, fmt.Errorf("catalog: create rule: %w: actor is required", ErrInvalid)
	}
	if err := validateRule(&r); err != nil {
		return Rule{}, fmt.Errorf("catalog: create rule: %w", err)
	}
	now := c.now()
	r.CreatedAt, r.UpdatedAt = now.UTC().Round(0), now.UTC().Round(0)
	def, err := json.Marshal(r)
	if err != nil {
		return Rule{}, fmt.Errorf("catalog: create rule: %w", err)
	}
	err = c.inTx(ctx, func(tx *sql.Tx) error { return c.insertRule(ctx, tx, r, def, actor, now) })
	if err != nil {
		return Rule{}, fmt.Errorf("catalog: create rule: %w", err)
	}
	return r, nil
}

// insertRule stores the new rule r (def is its definition) in tx, audited:
// ErrRuleExists when its name is taken in its org, ErrTooManyRules past
// MaxRulesPerOrg.
func (c *Catalog) insertRule(ctx context.Context, tx *sql.Tx, r Rule, def []byte, actor string, now time.Time) error {
	_, err := c.loadRule(ctx, tx, r.Org, r.Name)
	if err == nil {
		if r.Org != "" {
			return fmt.Errorf("%w: org %q already has a rule named %q", ErrRuleExists, r.Org, r.Name)
		}
		return fmt.Errorf("%w: a deployment rule named %q is already stored", ErrRuleExists, r.Name)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var n int
	if err := tx.QueryRowContext(ctx, c.d.q(`SELECT COUNT(*) FROM rules WHERE org = ?`), r.Org).Scan(&n); err != nil {
		return err
	}
	if n >= MaxRulesPerOrg {
		return fmt.Errorf("%w: org %q already has %d rules, the most an org may store; delete one first", ErrTooManyRules, r.Org, n)
	}
	if _, err := tx.ExecContext(ctx, c.d.q(`INSERT INTO rules (name, org, definition, enabled, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`),
		r.Name, r.Org, string(def), !r.Disabled, now.UnixNano(), now.UnixNano()); err != nil {
		return err
	}
	return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionRuleCreate, Target: ruleTarget(r.Org, r.Name), After: r}, now)
}

// UpdateRule replaces the rule named name stored for org (empty: the
// deployment's) with r (whose Name must be name or empty, and whose Org
// must be org), audited with the rule before and after. A change of
// window, period, subject or metric gives the rule new counters (the engine
// keys counters by them); a change of limit keeps the usage counted.
func (c *Catalog) UpdateRule(ctx context.Context, org, name string, r Rule, actor string) (Rule, error) {
	return c.changeRule(ctx, org, name, actor, func(before Rule) (Rule, error) {
		if r.Name != "" && r.Name != name {
			return Rule{}, fmt.Errorf("%w: the body names rule %q, the path %q: a rule cannot be renamed", ErrInvalid, r.Name, name)
		}
		if r.Org != org {
			return Rule{}, fmt.Errorf("%w: %w: the body names org %q, the rule is stored under %q; create the rule in the other org instead", ErrInvalid, errRuleOrg, r.Org, org)
		}
		r.Name = name
		if err := validateRule(&r); err != nil {
			return Rule{}, err
		}
		return r, nil
	})
}

// SetRuleEnabled enables or disables a stored rule, audited. A disabled rule
// counts nothing and refuses nothing.
func (c *Catalog) SetRuleEnabled(ctx context.Context, org, name string, enabled bool, actor string) (Rule, error) {
	return c.changeRule(ctx, org, name, actor, func(before Rule) (Rule, error) {
		before.Disabled = !enabled
		return before, nil
	})
}

// changeRule loads a rule, applies change and stores the result in one
// audited transaction.
func (c *Catalog) changeRule(ctx context.Context, org, name, actor string, change func(Rule) (Rule, error)) (Rule, error) {
	if actor == "" {
		return Rule{}, fmt.Errorf("catalog: update rule: %w: actor is required", ErrInvalid)
	}
	now := c.now()
	var after Rule
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		before, err := c.loadRule(ctx, tx, org, name)
		if errors.Is(err, sql.ErrNoRows) {
			return unknownRule(org, name)
		}
		if err != nil {
			return err
		}
		after, err = change(before)
		if err != nil {
			return err
		}
		after.CreatedAt, after.UpdatedAt = before.CreatedAt, now.UTC().Round(0)
		def, err := json.Marshal(after)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, c.d.q(`UPDATE rules SET definition = ?, enabled = ?, updated_at = ? WHERE org = ? AND name = ?`),
			string(def), !after.Disabled, now.UnixNano(), org, name); err != nil {
			return err
		}
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionRuleUpdate, Target: ruleTarget(org, name), Before: before, After: after}, now)
	})
	if err != nil {
		return Rule{}, fmt.Errorf("catalog: update rule %s: %w", name, err)
	}
	return after, nil
}

// unknownRule is the error for a rule that is not stored.
func unknownRule(org, name string) error {
	if org != "" {
		return fmt.Errorf("%w: org %q has no stored rule named %q", ErrUnknownRule, org, name)
	}
	return fmt.Errorf("%w: no deployment rule is named %q", ErrUnknownRule, name)
}

// DeleteRule removes the rule named name stored for org (empty: the
// deployment's), audited. Overrides that name it stay stored and apply
// again if a rule of that name comes back.
func (c *Catalog) DeleteRule(ctx context.Context, org, name, actor string) error {
	if actor == "" {
		return fmt.Errorf("catalog: delete rule: %w: actor is required", ErrInvalid)
	}
	now := c.now()
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		before, err := c.loadRule(ctx, tx, org, name)
		if errors.Is(err, sql.ErrNoRows) {
			return unknownRule(org, name)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, c.d.q(`DELETE FROM rules WHERE org = ? AND name = ?`), org, name); err != nil {
			return err
		}
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionRuleDelete, Target: ruleTarget(org, name), Before: before}, now)
	})
	if err != nil {
		return fmt.Errorf("catalog: delete rule %s: %w", name, err)
	}
	return nil
}

// GetRule returns the rule named name stored for org (empty: the
// deployment's), or ErrUnknownRule.
func (c *Catalog) GetRule(ctx context.Context, org, name string) (Rule, error) {
	r, err := c.loadRule(ctx, c.db, org, name)
	if errors.Is(err, sql.ErrNoRows) {
		return Rule{}, fmt.Errorf("catalog: get rule: %w", unknownRule(org, name))
	}
	if err != nil {
		return Rule{}, fmt.Errorf("catalog: get rule: %w", err)
	}
	return r, nil
}

func (c *Catalog) loadRule(ctx context.Context, q queryer, org, name string) (Rule, error) {
	return scanRule(q.QueryRowContext(ctx, c.d.q(`SELECT org, definition FROM rules WHERE org = ? AND name = ?`), org, name).Scan)
}

// scanRule reads a rule's org and definition. The org column is the rule's
// org: a definition stored by an earlier version may say "default" for a
// rule that applies in every org.
func scanRule(scan func(...any) error) (Rule, error) {
	var org, def string
	if err := scan(&org, &def); err != nil {
		return Rule{}, err
	}
	var r Rule
	if err := json.Unmarshal([]byte(def), &r); err != nil {
		return Rule{}, fmt.Errorf("rule %s: stored definition: %w", r.Name, err)
	}
	r.Org = org
	return r, nil
}

// ListRules returns the stored rules of the orgs given ("" names the
// deployment rules), or every stored rule when none is given, by org and
// name.
func (c *Catalog) ListRules(ctx context.Context, orgs ...string) ([]Rule, error) {
	query := `SELECT org, definition FROM rules`
	var args []any
	if len(orgs) > 0 {
		query += ` WHERE org IN (?` + strings.Repeat(`, ?`, len(orgs)-1) + `)`
		for _, o := range orgs {
			args = append(args, o)
		}
	}
	rows, err := c.db.QueryContext(ctx, c.d.q(query+` ORDER BY org, name`), args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: list rules: %w", err)
	}
	defer rows.Close()
	var out []Rule
	for rows.Next() {
		r, err := scanRule(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("catalog: list rules: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: list rules: %w", err)
	}
	return out, nil
}
