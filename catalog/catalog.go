// Package catalog holds the gateway's records: API keys, per-subject limit
// overrides, the usage ledger and the audit log. It is one implementation
// over database/sql; a small dialect seam (placeholders, migrations and their
// lock) separates SQLite (OpenSQLite) from PostgreSQL (OpenPostgres).
//
// Every change made through the catalog (a key created, revoked or rotated,
// an override set or deleted) writes its audit entry in the same transaction
// as the change, so the log cannot miss a change or record one that did not
// happen. Secrets never reach the database or the audit log: only their
// SHA-256 is stored.
//
// Two paths are built for the gateway's hot path and touch no database in the
// common case: Authenticate (a short-lived cache of successful lookups) and
// RecordUsage (aggregated in memory and flushed in the background).
package catalog

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib" // PostgreSQL through database/sql
	_ "modernc.org/sqlite"           // the pure-Go SQLite driver
)

// Defaults for the zero values of Options.
const (
	DefaultCacheTTL      = 5 * time.Second
	DefaultCacheSize     = 10000
	DefaultFlushInterval = time.Second
)

// Options configures a Catalog. The zero value is ready to use.
type Options struct {
	// Now tells the time: key creation and expiry, audit timestamps, the
	// ledger's day, the key cache's TTL. Nil means time.Now.
	Now func() time.Time
	// CacheTTL is how long a successful Authenticate is served from memory
	// before the database is asked again. A revocation or rotation made by
	// another process takes up to this long to be seen here; one made
	// through this Catalog is seen at once. Zero means DefaultCacheTTL; a
	// negative value disables the cache.
	CacheTTL time.Duration
	// CacheSize bounds the number of cached keys. Zero means
	// DefaultCacheSize.
	CacheSize int
	// FlushInterval is how long the background flusher waits before it
	// tries again after a failed write of the usage ledger. Entries are
	// written within a few milliseconds of being recorded, together
	// (group commit), so that a crash loses only those few milliseconds. Zero means DefaultFlushInterval; a
	// negative value disables the background flusher (only Flush and
	// Close write).
	FlushInterval time.Duration
	// OnFlushError is told when a background flush fails (the sums are kept
	// and retried at the next flush). Nil logs with slog.Default.
	OnFlushError func(error)
	// CallRetention is how long call records (RecordCall) are kept before
	// the background pruner deletes them. Zero means DefaultCallRetention;
	// a negative value keeps no call records at all.
	CallRetention time.Duration
}

// Catalog is the gateway's store of keys, overrides, usage and audit
// entries. It is safe for concurrent use. Close it to flush the ledger and
// release the database.
type Catalog struct {
	db    *sql.DB
	d     *dialect
	now   func() time.Time
	cache *keyCache
	led   *ledger

	// pgConfig is the PostgreSQL connection's, for the listener of
	// WatchPolicy; nil on SQLite.
	pgConfig *pgx.ConnConfig
	// tables prefixes the ledger's tables in the statements that write
	// them: on PostgreSQL the catalog's schema, so that they name the same
	// tables on a counter store's connections (QueueRecords).
	tables string

	onFlushError  func(error)
	callRetention time.Duration
	stop          chan struct{}
	stopped       chan struct{}
	// pruned is closed when the call records' pruner has stopped.
	pruned    chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Sentinel errors, usable with errors.Is.
var (
	// ErrUnknownKey: the secret is malformed, names no key, or does not
	// match the key it names. Deliberately one error for all three, so a
	// caller learns nothing about which IDs exist.
	ErrUnknownKey = errors.New("unknown API key")
	// ErrRevokedKey: the secret is right but the key was revoked.
	ErrRevokedKey = errors.New("API key revoked")
	// ErrExpiredKey: the secret is right but the key has expired.
	ErrExpiredKey = errors.New("API key expired")
	// ErrUnknownOverride: no override has that rule, attribute and value.
	ErrUnknownOverride = errors.New("unknown override")
	// ErrUnknownSubject: no key carries the subject an override names.
	ErrUnknownSubject = errors.New("unknown subject")
	// ErrUnknownRule: no stored rule has that name.
	ErrUnknownRule = errors.New("unknown rule")
	// ErrRuleExists: a stored rule already has that name.
	ErrRuleExists = errors.New("rule exists")
	// ErrTooManyRules: the org already has MaxRulesPerOrg stored rules.
	ErrTooManyRules = errors.New("too many rules")
	// ErrUnknownToken: the admin token is malformed, names no token, or
	// does not match the token it names.
	ErrUnknownToken = errors.New("unknown admin token")
	// ErrRevokedToken: the admin token was revoked.
	ErrRevokedToken = errors.New("admin token revoked")
	// ErrExpiredToken: the admin token has expired.
	ErrExpiredToken = errors.New("admin token expired")
	// ErrInvalid: an argument fails validation; the wrapping error says
	// which and why.
	ErrInvalid = errors.New("invalid argument")
)

// OpenSQLite opens (or creates) the catalog in the SQLite file at path and
// applies any migration it has not yet seen. The file may be shared with
// other processes (a CLI next to a running gateway): it runs in WAL mode and
// every write transaction takes the write lock at its start.
func OpenSQLite(path string, opts Options) (*Catalog, error) {
	if path == "" {
		return nil, fmt.Errorf("catalog: open sqlite: %w: path is required", ErrInvalid)
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "foreign_keys(ON)")
	// BEGIN IMMEDIATE: a transaction that reads then writes cannot fail to
	// upgrade its lock half way; it waits (busy_timeout) at BEGIN instead.
	q.Set("_txlock", "immediate")
	// Several processes opening a fresh file at once (the gateway and the
	// CLI) can meet SQLITE_BUSY while one of them switches it to WAL, a
	// step busy_timeout does not cover: try again for a few seconds.
	for attempt := 1; ; attempt++ {
		db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
		if err != nil {
			return nil, fmt.Errorf("catalog: open sqlite %s: %w", path, err)
		}
		// Readers run beside the one writer in WAL mode; a few connections
		// are plenty for the catalog's traffic (one more for WatchPolicy).
		db.SetMaxOpenConns(5)
		db.SetMaxIdleConns(5)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		c, err := open(db, sqliteDialect, opts)
		if err == nil {
			return c, nil
		}
		db.Close()
		if attempt >= 100 || !isBusy(err) {
			return nil, fmt.Errorf("catalog: open sqlite %s: %w", path, err)
		}
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
	}
}

// isBusy reports whether err is SQLite's "database is locked".
func isBusy(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// OpenPostgres opens the catalog in the PostgreSQL database at url (a
// postgres:// or postgresql:// URL, or a key=value connection string) and
// applies any migration it has not yet seen. The tables live in the
// connection's current schema (the first of its search_path; a search_path
// parameter of the URL sets it). Migrations run under a transaction-scoped
// advisory lock, so replicas starting together migrate once; a schema newer
// than this binary is refused. ctx bounds connecting and migrating only.
func OpenPostgres(ctx context.Context, url string, opts Options) (*Catalog, error) {
	if url == "" {
		return nil, fmt.Errorf("catalog: open postgres: %w: url is required", ErrInvalid)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// The error may quote the URL, password and all; say only that it
		// failed to parse.
		return nil, fmt.Errorf("catalog: open postgres: %w: cannot parse the connection URL", ErrInvalid)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(time.Hour)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog: open postgres %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	c, err := openContext(ctx, db, postgresDialect, opts)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog: open postgres %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	var schema string
	if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		c.Close()
		return nil, fmt.Errorf("catalog: open postgres %s:%d/%s: current schema: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	c.pgConfig, c.tables = cfg, pgx.Identifier{schema}.Sanitize()+"."
	return c, nil
}

// open migrates db and starts the ledger's flusher. It is shared by every
// dialect.
func open(db *sql.DB, d *dialect, opts Options) (*Catalog, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return openContext(ctx, db, d, opts)
}

// openContext is open with ctx bounding the migrations.
func openContext(ctx context.Context, db *sql.DB, d *dialect, opts Options) (*Catalog, error) {
	if err := migrateSchema(ctx, db, d); err != nil {
		return nil, err
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	ttl := opts.CacheTTL
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	size := opts.CacheSize
	if size <= 0 {
		size = DefaultCacheSize
	}
	c := &Catalog{
		db:            db,
		d:             d,
		now:           now,
		cache:         newKeyCache(ttl, size),
		led:           newLedger(),
		onFlushError:  opts.OnFlushError,
		callRetention: cmp.Or(opts.CallRetention, DefaultCallRetention),
		stop:          make(chan struct{}),
		stopped:       make(chan struct{}),
		pruned:        make(chan struct{}),
	}
	if c.onFlushError == nil {
		c.onFlushError = func(err error) { slog.Default().Error("catalog: usage flush failed", "err", err) }
	}
	interval := opts.FlushInterval
	if interval == 0 {
		interval = DefaultFlushInterval
	}
	if interval > 0 {
		go c.flushLoop(interval)
		go c.pruneLoop()
	} else {
		close(c.stopped)
		close(c.pruned)
	}
	return c, nil
}

// Ping reports whether the catalog's database answers: for a readiness
// check.
func (c *Catalog) Ping(ctx context.Context) error {
	if err := c.db.PingContext(ctx); err != nil {
		return fmt.Errorf("catalog: ping: %w", err)
	}
	return nil
}

// Close stops the background flusher, writes the ledger's last sums and
// closes the database. Calling it again returns the first result.
func (c *Catalog) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.stopped
		<-c.pruned
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		flushErr := c.Flush(ctx)
		if flushErr != nil {
			flushErr = fmt.Errorf("catalog: close: %w", flushErr)
		}
		c.led.closeStmts()
		c.closeErr = errors.Join(flushErr, c.db.Close())
	})
	return c.closeErr
}

// inTx runs fn in one write transaction and commits it when fn succeeds.
func (c *Catalog) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// Times are stored as Unix nanoseconds; the zero time is NULL ("never").

func dbTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromDBTime(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

func dbInt(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func fromDBInt(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	v := n.Int64
	return &v
}
