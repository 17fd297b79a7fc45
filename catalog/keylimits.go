package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
)

// ActionKeyUpdate is the audit action of UpdateKey.
const ActionKeyUpdate = "key.update"

// KeyLimit is one of a key's own limits, made with the key: an override of
// the rule named Rule.Name for that key alone (attribute key, value the
// key's ID). A key's limits are overrides like any other: they resolve,
// list and delete as overrides do.
//
// The override needs a rule of that name in force, one counter per key
// (subject key). Store says the caller found none: Rule is then stored as
// a deployment rule with a limit of 0, so it binds no key but those whose
// own override gives it a limit. A rule of that name already stored is
// used as it is when it has Rule's shape (kind, subject, metric, window,
// period), and refused with ErrInvalid when it does not.
type KeyLimit struct {
	Rule  Rule
	Store bool
	// Limit is the key's own limit: 0 disables the rule for the key.
	Limit int64
}

// CreateKeyWithLimits is CreateKey with the key's own limits: the key, the
// rules Store asks for and one override per limit are written in one
// transaction, each audited as done by actor, or none is. It returns the
// overrides made.
func (c *Catalog) CreateKeyWithLimits(ctx context.Context, k Key, limits []KeyLimit, actor string) (secret string, created Key, overrides []Override, err error) {
	for _, l := range limits {
		if err := checkKeyLimit(l); err != nil {
			return "", Key{}, nil, fmt.Errorf("catalog: create key: %w", err)
		}
	}
	create := func() error {
		secret, created, err = c.createKey(ctx, k, actor, func(tx *sql.Tx, k Key, now time.Time) error {
			overrides = overrides[:0]
			for _, l := range limits {
				o, err := c.insertKeyLimit(ctx, tx, k, l, actor, now)
				if err != nil {
					return err
				}
				overrides = append(overrides, o)
			}
			return nil
		})
		return err
	}
	err = create()
	// Two keys made at once on PostgreSQL may both find a rule missing and
	// store it; the second's insert then fails on the name. Once more, it
	// finds the rule the first stored.
	if err != nil && c.keyLimitRuleStored(ctx, limits) {
		err = create()
	}
	if err != nil {
		return "", Key{}, nil, err
	}
	return secret, created, overrides, nil
}

// keyLimitRuleStored reports whether a rule that limits asked to store is
// stored now.
func (c *Catalog) keyLimitRuleStored(ctx context.Context, limits []KeyLimit) bool {
	for _, l := range limits {
		if l.Store {
			if _, err := c.loadRule(ctx, c.db, "", l.Rule.Name); err == nil {
				return true
			}
		}
	}
	return false
}

// checkKeyLimit refuses a limit that could not be a per-key override.
func checkKeyLimit(l KeyLimit) error {
	switch {
	case l.Rule.Name == "":
		return fmt.Errorf("%w: a key limit needs its rule's name", ErrInvalid)
	case l.Rule.Subject != "key":
		return fmt.Errorf("%w: key limit %q: its rule must count per key (subject key), not %q", ErrInvalid, l.Rule.Name, l.Rule.Subject)
	case l.Limit < 0:
		return fmt.Errorf("%w: key limit %q must not be negative (0 disables the rule for the key), got %d", ErrInvalid, l.Rule.Name, l.Limit)
	case l.Store && l.Rule.Org != "":
		return fmt.Errorf("%w: key limit %q: a rule made for key limits is a deployment rule (no org)", ErrInvalid, l.Rule.Name)
	}
	return nil
}

// insertKeyLimit writes one of the new key k's limits in tx: its rule
// when asked and missing, then its override.
func (c *Catalog) insertKeyLimit(ctx context.Context, tx *sql.Tx, k Key, l KeyLimit, actor string, now time.Time) (Override, error) {
	if l.Store {
		stored, err := c.loadRule(ctx, tx, "", l.Rule.Name)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			r := l.Rule
			r.Limit, r.Disabled = 0, false
			if err := validateRule(&r); err != nil {
				return Override{}, err
			}
			r.CreatedAt, r.UpdatedAt = now.UTC().Round(0), now.UTC().Round(0)
			def, err := json.Marshal(r)
			if err != nil {
				return Override{}, err
			}
			if err := c.insertRule(ctx, tx, r, def, actor, now); err != nil {
				return Override{}, err
			}
		case err != nil:
			return Override{}, err
		case !SameShape(stored.Rule, l.Rule.Rule):
			return Override{}, fmt.Errorf("%w: key limit %q: the stored rule of that name is a %s per %s of %s, not a %s per %s of %s; change or delete it first",
				ErrInvalid, l.Rule.Name, stored.Kind, stored.Subject, stored.Metric, l.Rule.Kind, l.Rule.Subject, l.Rule.Metric)
		}
	}
	limit := l.Limit
	o := Override{Rule: l.Rule.Name, Attribute: "key", Value: k.ID, Limit: &limit}
	// The key is new: no override of it exists yet.
	if _, err := tx.ExecContext(ctx, c.d.q(`INSERT INTO overrides (rule, org, attribute, value, limit_value, burst, expires_at, updated_at)
		VALUES (?, ?, ?, ?, ?, NULL, NULL, ?)`), o.Rule, o.Org, o.Attribute, o.Value, limit, now.UnixNano()); err != nil {
		return Override{}, err
	}
	e := AuditEntry{Actor: actor, Action: ActionOverrideSet, Target: overrideTarget(o), After: o, Workspace: k.Workspace, Org: k.Org}
	if err := c.insertAudit(ctx, tx, e, now); err != nil {
		return Override{}, err
	}
	return o, nil
}

// SameShape reports whether two rules count the same thing the same way:
// kind, subject, metric, window and period (the limit may differ). An
// override made for one is meant for the other.
func SameShape(a, b sluice.Rule) bool {
	return a.Kind == b.Kind && a.Subject == b.Subject && countedMetric(a) == countedMetric(b) &&
		a.Window == b.Window && a.Period == b.Period && a.TimeZone == b.TimeZone
}

// countedMetric is what r counts: a concurrency rule counts calls in
// flight whatever it names, and no metric means requests.
func countedMetric(r sluice.Rule) sluice.Metric {
	switch {
	case r.Kind == sluice.KindConcurrency:
		return sluice.MetricConcurrency
	case r.Metric == "":
		return sluice.MetricRequests
	}
	return r.Metric
}

// KeyUpdate is a change to a key's record: each non-nil field replaces the
// key's value. The secret and the identity (org, workspace, team, user)
// never change.
type KeyUpdate struct {
	Name *string
	Tier *string
	// AllowedModels replaces the list; an empty list allows any model.
	AllowedModels *[]string
	// ExpiresAt replaces the expiry; a zero time means never.
	ExpiresAt *time.Time
	// Class replaces the priority class; empty means the tier's.
	Class *string
	// MaxWait replaces the key's bound on waiting; zero means the tier's.
	MaxWait *time.Duration
}

// UpdateKey changes a key's name, tier, allowed models, expiry, class or
// max wait, audited as done by actor with the key before and after, and
// returns the key. The secret stays valid. A revoked key cannot be
// changed (ErrRevokedKey). This process sees the change at once; others
// sharing the database within Options.CacheTTL.
func (c *Catalog) UpdateKey(ctx context.Context, id string, u KeyUpdate, actor string) (Key, error) {
	now := c.now()
	switch {
	case actor == "":
		return Key{}, fmt.Errorf("catalog: update key: %w: actor is required", ErrInvalid)
	case u.ExpiresAt != nil && !u.ExpiresAt.IsZero() && !u.ExpiresAt.After(now):
		return Key{}, fmt.Errorf("catalog: update key: %w: expiry %s is not in the future", ErrInvalid, u.ExpiresAt.Format(time.RFC3339))
	}
	if u.Tier != nil {
		if err := checkValue("tier", *u.Tier); err != nil {
			return Key{}, fmt.Errorf("catalog: update key: %w: %v", ErrInvalid, err)
		}
	}
	var class string
	var maxWait time.Duration
	if u.Class != nil {
		class = *u.Class
	}
	if u.MaxWait != nil {
		maxWait = *u.MaxWait
	}
	if err := checkClassAndWait(class, maxWait); err != nil {
		return Key{}, fmt.Errorf("catalog: update key: %w", err)
	}
	var after Key
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		before, _, err := c.loadKey(ctx, tx, id, false)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrUnknownKey
		}
		if err != nil {
			return err
		}
		if !before.RevokedAt.IsZero() {
			return ErrRevokedKey
		}
		after = before
		if u.Name != nil {
			after.Name = *u.Name
		}
		if u.Tier != nil {
			after.Tier = *u.Tier
		}
		if u.AllowedModels != nil {
			after.AllowedModels = slices.Clone(*u.AllowedModels)
			if len(after.AllowedModels) == 0 {
				after.AllowedModels = nil
			}
		}
		if u.ExpiresAt != nil {
			after.ExpiresAt = u.ExpiresAt.UTC().Round(0)
		}
		if u.Class != nil {
			after.Class = *u.Class
		}
		if u.MaxWait != nil {
			after.MaxWait = sluice.Duration(*u.MaxWait)
		}
		models, err := json.Marshal(nonNil(after.AllowedModels))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, c.d.q(`UPDATE api_keys SET name = ?, tier = ?, allowed_models = ?, expires_at = ?, class = ?, max_wait = ? WHERE id = ?`),
			after.Name, after.Tier, string(models), dbTime(after.ExpiresAt), after.Class, int64(after.MaxWait), id); err != nil {
			return err
		}
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionKeyUpdate, Target: keyTarget(id), Before: before, After: after, Workspace: before.Workspace, Org: before.Org}, now)
	})
	c.cache.invalidate(id)
	if err != nil {
		return Key{}, fmt.Errorf("catalog: update key %s: %w", id, err)
	}
	return after, nil
}
