package catalog

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/names"
)

// Key is an API key's record: the identity a request made with it carries.
// It never holds the secret or its hash.
type Key struct {
	// ID is random, public, and part of the secret: it names the record.
	ID        string `json:"id"`
	Org       string `json:"org"`
	Workspace string `json:"workspace"`
	Team      string `json:"team,omitempty"`
	User      string `json:"user"`
	Tier      string `json:"tier,omitempty"`
	// AllowedModels limits the models the key may call; empty allows any.
	AllowedModels []string `json:"allowed_models,omitempty"`
	// ExpiresAt is when the key stops working; zero means never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	// RevokedAt is when the key was revoked; zero means it was not.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// Name is a label for people.
	Name string `json:"name,omitempty"`
	// Assert makes the key a service key: the attributes (workspace, user,
	// team) it may set per request with X-Sluice-Workspace, X-Sluice-User
	// and X-Sluice-Team, within its own org. Empty: it asserts nothing.
	Assert []string `json:"assert,omitempty"`
	// AssertWorkspaces limits the workspaces a service key may assert:
	// each an exact name or a prefix ending in "*". Empty: any workspace
	// of its org.
	AssertWorkspaces []string `json:"assert_workspaces,omitempty"`
	// Class is the key's priority class on rules with classes; empty
	// means its tier's (the gateway's configuration), else the rule's
	// default class.
	Class string `json:"class,omitempty"`
	// MaxWait bounds how long the key's calls may wait for rate and
	// concurrency rules (X-Sluice-Priority: batch, X-Sluice-Max-Wait):
	// at most MaxKeyWait; zero means its tier's bound, else the
	// deployment's.
	MaxWait sluice.Duration `json:"max_wait,omitempty"`
	// Turns lets the key group its calls into turns (X-Sluice-Turn): a
	// requests rate rule charges a turn's calls once, up to
	// sluice.MaxTurnCalls. False: every call is charged, whatever the key
	// sends (unless its tier allows turns).
	Turns bool `json:"turns,omitempty"`
	// NoCache keeps the key's calls out of the response cache: they never
	// read nor write it, as with Cache-Control: no-cache, no-store.
	NoCache bool `json:"no_cache,omitempty"`
}

// MaxKeyWait bounds a key's MaxWait, as the configuration bounds the
// deployment's and the tiers' max_wait.
const MaxKeyWait = time.Hour

// checkClassAndWait refuses a class that is not a name (names.Check; empty
// is none) and a wait outside 0 to MaxKeyWait.
func checkClassAndWait(class string, maxWait time.Duration) error {
	if class != "" {
		if err := names.Check(class); err != nil {
			return fmt.Errorf("%w: class %v", ErrInvalid, err)
		}
	}
	if maxWait < 0 || maxWait > MaxKeyWait {
		return fmt.Errorf("%w: max_wait must be from 0 (the tier's or the deployment's) to %v, got %v", ErrInvalid, MaxKeyWait, maxWait)
	}
	return nil
}

// AllowsModel reports whether the key may call model.
func (k Key) AllowsModel(model string) bool {
	return len(k.AllowedModels) == 0 || slices.Contains(k.AllowedModels, model)
}

// Audit actions written by the catalog itself.
const (
	ActionKeyCreate      = "key.create"
	ActionKeyRevoke      = "key.revoke"
	ActionKeyRotate      = "key.rotate"
	ActionOverrideSet    = "override.set"
	ActionOverrideDelete = "override.delete"
	ActionSessionClose   = "session.close"
)

// A secret is "sk-sluice-" + key ID + "-" + 32 random bytes in base62:
//
//	sk-sluice-abcdefgh2345-0aZ...(43 characters)
//
// The ID lets Authenticate find the record without scanning; the random
// part is the secret proper (256 bits).
const (
	secretPrefix  = "sk-sluice-"
	keyIDLen      = 12
	secretRandLen = 43 // 62^43 > 2^256
	secretLen     = len(secretPrefix) + keyIDLen + 1 + secretRandLen
)

var keyIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newKeyID returns 12 base32 characters (60 random bits).
func newKeyID() string {
	var b [8]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program first)
	return keyIDEncoding.EncodeToString(b[:])[:keyIDLen]
}

// newSecret returns a fresh secret for the key id.
func newSecret(id string) string {
	var b [32]byte
	rand.Read(b[:])
	random := new(big.Int).SetBytes(b[:]).Text(62)
	return secretPrefix + id + "-" + strings.Repeat("0", secretRandLen-len(random)) + random
}

// hashSecret is SHA-256 of the whole secret. A fast hash is right here, not
// a password hash (bcrypt, argon2): the secret carries 256 random bits, so
// there is no dictionary to slow down and brute force is hopeless at any
// speed, and Authenticate runs on every request.
func hashSecret(secret string) [sha256.Size]byte {
	// Copy to a fixed array so the hash input stays on the stack.
	var buf [secretLen]byte
	if len(secret) == secretLen {
		copy(buf[:], secret)
		return sha256.Sum256(buf[:])
	}
	return sha256.Sum256([]byte(secret))
}

// parseSecret returns the key ID in secret, or false when secret is not
// shaped like one of ours.
func parseSecret(secret string) (id string, ok bool) {
	if len(secret) != secretLen || !strings.HasPrefix(secret, secretPrefix) {
		return "", false
	}
	id = secret[len(secretPrefix) : len(secretPrefix)+keyIDLen]
	rest := secret[len(secretPrefix)+keyIDLen:]
	if rest[0] != '-' {
		return "", false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return "", false
		}
	}
	for i := 1; i < len(rest); i++ {
		if c := rest[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return "", false
		}
	}
	return id, true
}

func keyTarget(id string) string { return "key/" + id }

// CreateKey creates an API key and returns its secret, the only time the
// secret exists outside the caller: only its hash is stored. Workspace and
// User are required; Org defaults to "default"; ID, CreatedAt and RevokedAt
// are set by the catalog. The creation is audited as done by actor.
func (c *Catalog) CreateKey(ctx context.Context, k Key, actor string) (secret string, created Key, err error) {
	return c.createKey(ctx, k, actor, nil)
}

// createKey is CreateKey; also, when set, in the key's transaction, after
// the key is written and audited.
func (c *Catalog) createKey(ctx context.Context, k Key, actor string, also func(tx *sql.Tx, k Key, now time.Time) error) (secret string, created Key, err error) {
	now := c.now()
	switch {
	case k.Workspace == "":
		return "", Key{}, fmt.Errorf("catalog: create key: %w: workspace is required", ErrInvalid)
	case k.User == "":
		return "", Key{}, fmt.Errorf("catalog: create key: %w: user is required", ErrInvalid)
	case actor == "":
		return "", Key{}, fmt.Errorf("catalog: create key: %w: actor is required", ErrInvalid)
	case !k.ExpiresAt.IsZero() && !k.ExpiresAt.After(now):
		return "", Key{}, fmt.Errorf("catalog: create key: %w: expiry %s is not in the future", ErrInvalid, k.ExpiresAt.Format(time.RFC3339))
	}
	if err := checkClassAndWait(k.Class, time.Duration(k.MaxWait)); err != nil {
		return "", Key{}, fmt.Errorf("catalog: create key: %w", err)
	}
	assert, workspaces, err := checkAssert(k.Assert, k.AssertWorkspaces)
	if err != nil {
		return "", Key{}, fmt.Errorf("catalog: create key: %w", err)
	}
	k.Assert, k.AssertWorkspaces = assert, workspaces
	if k.Org == "" {
		k.Org = "default"
	}
	for _, f := range [][2]string{{"org", k.Org}, {"workspace", k.Workspace}, {"team", k.Team}, {"user", k.User}, {"tier", k.Tier}} {
		if err := checkValue(f[0], f[1]); err != nil {
			return "", Key{}, fmt.Errorf("catalog: create key: %w: %v", ErrInvalid, err)
		}
	}
	k.ID = newKeyID()
	k.CreatedAt = now.UTC().Round(0)
	k.RevokedAt = time.Time{}
	k.ExpiresAt = k.ExpiresAt.UTC().Round(0)
	k.AllowedModels = slices.Clone(k.AllowedModels)
	models, err := json.Marshal(nonNil(k.AllowedModels))
	if err != nil {
		return "", Key{}, fmt.Errorf("catalog: create key: %w", err)
	}
	assertJSON, _ := json.Marshal(nonNil(k.Assert)) // a []string always marshals
	workspacesJSON, _ := json.Marshal(nonNil(k.AssertWorkspaces))
	secret = newSecret(k.ID)
	hash := hashSecret(secret)
	err = c.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, c.d.q(`INSERT INTO api_keys
			(id, secret_hash, org, workspace, team, user_id, tier, allowed_models, name, expires_at, created_at, revoked_at,
			may_assert, assert_workspaces, class, max_wait, turns, no_cache)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)`),
			k.ID, hash[:], k.Org, k.Workspace, k.Team, k.User, k.Tier, string(models), k.Name,
			dbTime(k.ExpiresAt), dbTime(k.CreatedAt), string(assertJSON), string(workspacesJSON), k.Class, int64(k.MaxWait), k.Turns, k.NoCache); err != nil {
			return err
		}
		if err := c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionKeyCreate, Target: keyTarget(k.ID), After: k, Workspace: k.Workspace, Org: k.Org}, now); err != nil {
			return err
		}
		if also != nil {
			return also(tx, k, now)
		}
		return nil
	})
	if err != nil {
		return "", Key{}, fmt.Errorf("catalog: create key: %w", err)
	}
	return secret, k, nil
}

// Authenticate returns the key a secret belongs to. It refuses with
// ErrUnknownKey (malformed, no such key, or wrong secret), ErrRevokedKey or
// ErrExpiredKey; other errors come from the database.
//
// A successful lookup is cached for Options.CacheTTL, so a key in steady use
// costs a hash and a map lookup, no database round trip. The cached hash is
// compared in constant time like the stored one, and expiry is checked on
// every call.
func (c *Catalog) Authenticate(ctx context.Context, secret string) (Key, error) {
	if k, ok, err := c.AuthenticateCached(secret); ok {
		return k, err
	}
	id, _ := parseSecret(secret) // one that does not parse was answered above
	hash := hashSecret(secret)
	now := c.now()
	gen := c.cache.generation()
	k, stored, err := c.loadKey(ctx, c.db, id, true)
	if errors.Is(err, sql.ErrNoRows) {
		c.cache.refuse(&hash, ErrUnknownKey, now)
		return Key{}, ErrUnknownKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("catalog: authenticate: %w", err)
	}
	// Only a holder of the right secret learns whether the key is revoked
	// or expired.
	if subtle.ConstantTimeCompare(stored, hash[:]) != 1 {
		c.cache.refuse(&hash, ErrUnknownKey, now)
		return Key{}, ErrUnknownKey
	}
	if !k.RevokedAt.IsZero() {
		c.cache.refuse(&hash, ErrRevokedKey, now)
		return Key{}, ErrRevokedKey
	}
	c.cache.put(id, &hash, k, now, gen)
	return unexpired(k, now)
}

// AuthenticateCached answers as Authenticate when it can without the
// database: for a secret that is not shaped like a key (ErrUnknownKey),
// for a key the cache holds (the key, or ErrExpiredKey), and for a secret
// the database refused within the cache's TTL (its refusal again). ok is false
// when only the database can tell; then Authenticate must be asked. A
// caller that bounds database calls with a deadline needs none for an
// answer from here.
func (c *Catalog) AuthenticateCached(secret string) (_ Key, ok bool, _ error) {
	id, ok := parseSecret(secret)
	if !ok {
		return Key{}, true, ErrUnknownKey
	}
	hash := hashSecret(secret)
	now := c.now()
	k, ok := c.cache.get(id, &hash, now)
	if !ok {
		if err, refused := c.cache.refusedAt(&hash, now); refused {
			return Key{}, true, err
		}
		return Key{}, false, nil
	}
	k, err := unexpired(k, now)
	return k, true, err
}

// unexpired returns k, the caller's own copy, unless it expired at now.
func unexpired(k Key, now time.Time) (Key, error) {
	if !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) {
		return Key{}, ErrExpiredKey
	}
	k.AllowedModels = slices.Clone(k.AllowedModels)
	k.Assert, k.AssertWorkspaces = slices.Clone(k.Assert), slices.Clone(k.AssertWorkspaces)
	return k, nil
}

const keyColumns = `id, org, workspace, team, user_id, tier, allowed_models, name, expires_at, created_at, revoked_at, may_assert, assert_workspaces,
	class, max_wait, turns, no_cache`

type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// loadKey reads one key, and its secret hash when withHash. A missing key
// is sql.ErrNoRows.
func (c *Catalog) loadKey(ctx context.Context, q queryer, id string, withHash bool) (Key, []byte, error) {
	cols := keyColumns
	if withHash {
		cols += ", secret_hash"
	}
	row := q.QueryRowContext(ctx, c.d.q(`SELECT `+cols+` FROM api_keys WHERE id = ?`), id)
	var hash []byte
	k, err := scanKey(row.Scan, &hash, withHash)
	return k, hash, err
}

func scanKey(scan func(...any) error, hash *[]byte, withHash bool) (Key, error) {
	var k Key
	var models, assert, workspaces string
	var expires, created, revoked sql.NullInt64
	var maxWait int64
	dest := []any{&k.ID, &k.Org, &k.Workspace, &k.Team, &k.User, &k.Tier, &models, &k.Name, &expires, &created, &revoked, &assert, &workspaces,
		&k.Class, &maxWait, &k.Turns, &k.NoCache}
	if withHash {
		dest = append(dest, hash)
	}
	if err := scan(dest...); err != nil {
		return Key{}, err
	}
	if models != "" && models != "[]" {
		if err := json.Unmarshal([]byte(models), &k.AllowedModels); err != nil {
			return Key{}, fmt.Errorf("key %s: allowed models: %w", k.ID, err)
		}
	}
	var err error
	if k.Assert, err = decodeList("assert", assert); err != nil {
		return Key{}, fmt.Errorf("key %s: %w", k.ID, err)
	}
	if k.AssertWorkspaces, err = decodeList("assert_workspaces", workspaces); err != nil {
		return Key{}, fmt.Errorf("key %s: %w", k.ID, err)
	}
	k.ExpiresAt, k.CreatedAt, k.RevokedAt = fromDBTime(expires), fromDBTime(created), fromDBTime(revoked)
	k.MaxWait = sluice.Duration(maxWait)
	return k, nil
}

// ListKeys returns the keys of a workspace (every key when workspace is
// empty), revoked ones included, oldest first.
func (c *Catalog) ListKeys(ctx context.Context, workspace string) ([]Key, error) {
	query := `SELECT ` + keyColumns + ` FROM api_keys`
	var args []any
	if workspace != "" {
		query += ` WHERE workspace = ?`
		args = append(args, workspace)
	}
	rows, err := c.db.QueryContext(ctx, c.d.q(query+` ORDER BY created_at, id`), args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: list keys: %w", err)
	}
	defer rows.Close()
	var keys []Key
	for rows.Next() {
		k, err := scanKey(rows.Scan, nil, false)
		if err != nil {
			return nil, fmt.Errorf("catalog: list keys: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: list keys: %w", err)
	}
	return keys, nil
}

// RevokeKey revokes a key for good, audited as done by actor. Revoking a
// revoked key changes nothing. This process stops accepting the key at
// once; other processes sharing the database within Options.CacheTTL.
func (c *Catalog) RevokeKey(ctx context.Context, id, actor string) error {
	if actor == "" {
		return fmt.Errorf("catalog: revoke key: %w: actor is required", ErrInvalid)
	}
	now := c.now()
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		before, _, err := c.loadKey(ctx, tx, id, false)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrUnknownKey
		}
		if err != nil {
			return err
		}
		if !before.RevokedAt.IsZero() {
			return nil
		}
		after := before
		after.RevokedAt = now.UTC().Round(0)
		if _, err := tx.ExecContext(ctx, c.d.q(`UPDATE api_keys SET revoked_at = ? WHERE id = ?`), dbTime(after.RevokedAt), id); err != nil {
			return err
		}
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionKeyRevoke, Target: keyTarget(id), Before: before, After: after, Workspace: before.Workspace, Org: before.Org}, now)
	})
	c.cache.invalidate(id)
	if err != nil {
		return fmt.Errorf("catalog: revoke key %s: %w", id, err)
	}
	return nil
}

// RotateKey gives a key a new secret, keeping its ID and identity, and
// returns it; the old secret stops working (in other processes sharing the
// database, within Options.CacheTTL). A revoked key cannot be rotated.
// The rotation is audited as done by actor.
func (c *Catalog) RotateKey(ctx context.Context, id, actor string) (secret string, err error) {
	if actor == "" {
		return "", fmt.Errorf("catalog: rotate key: %w: actor is required", ErrInvalid)
	}
	now := c.now()
	secret = newSecret(id)
	hash := hashSecret(secret)
	err = c.inTx(ctx, func(tx *sql.Tx) error {
		k, _, err := c.loadKey(ctx, tx, id, false)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrUnknownKey
		}
		if err != nil {
			return err
		}
		if !k.RevokedAt.IsZero() {
			return ErrRevokedKey
		}
		if _, err := tx.ExecContext(ctx, c.d.q(`UPDATE api_keys SET secret_hash = ? WHERE id = ?`), hash[:], id); err != nil {
			return err
		}
		return c.insertAudit(ctx, tx, AuditEntry{Actor: actor, Action: ActionKeyRotate, Target: keyTarget(id), Before: k, After: k, Workspace: k.Workspace, Org: k.Org}, now)
	})
	c.cache.invalidate(id)
	if err != nil {
		return "", fmt.Errorf("catalog: rotate key %s: %w", id, err)
	}
	return secret, nil
}

// GetKey returns the key record with that ID (never its secret), or
// ErrUnknownKey.
func (c *Catalog) GetKey(ctx context.Context, id string) (Key, error) {
	k, _, err := c.loadKey(ctx, c.db, id, false)
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, ErrUnknownKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("catalog: get key: %w", err)
	}
	return k, nil
}

// Workspaces returns the distinct workspaces of the keys of org (of every
// key when org is empty), sorted.
func (c *Catalog) Workspaces(ctx context.Context, org string) ([]string, error) {
	rows, err := c.db.QueryContext(ctx, c.d.q(`SELECT DISTINCT workspace FROM api_keys WHERE (? = '' OR org = ?) ORDER BY workspace`), org, org)
	if err != nil {
		return nil, fmt.Errorf("catalog: workspaces: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, fmt.Errorf("catalog: workspaces: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: workspaces: %w", err)
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
