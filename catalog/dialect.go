package catalog

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations
var migrationFiles embed.FS

// dialect is what differs between the databases the catalog runs on. The
// queries themselves are written once, in the SQL both SQLite and PostgreSQL
// accept (ON CONFLICT ... DO UPDATE, excluded.*), with ? placeholders.
type dialect struct {
	// name is also the directory of the dialect's migrations.
	name string
	// rebind turns ? placeholders into the dialect's; nil keeps them.
	rebind func(query string) string
	// migrationLock, when set, is run first in every migration transaction:
	// it serialises processes migrating the same database at once. SQLite
	// needs none (its transactions take the write lock at BEGIN).
	migrationLock string
	// subjectLock, when set, is run in a transaction with one text
	// argument: it serialises transactions about the same subject (the
	// open sessions of one user) across processes. SQLite needs none.
	subjectLock string
}

var sqliteDialect = &dialect{name: "sqlite"}

// postgresDialect serves OpenPostgres over pgx's database/sql driver. Its
// migration transactions take a transaction-scoped advisory lock, keyed by
// the schema the catalog lives in, so replicas starting together migrate
// once.
var postgresDialect = &dialect{
	name:          "postgres",
	rebind:        dollarPlaceholders,
	migrationLock: `SELECT pg_advisory_xact_lock(1397506889, hashtext(current_schema()))`,
	subjectLock:   `SELECT pg_advisory_xact_lock(1397506890, hashtext(current_schema() || ?))`,
}

// q returns query in the dialect's placeholder syntax.
func (d *dialect) q(query string) string {
	if d.rebind == nil {
		return query
	}
	return d.rebind(query)
}

// dollarPlaceholders numbers the ? placeholders of query as $1, $2, ...,
// leaving those inside quoted strings and identifiers alone.
func dollarPlaceholders(query string) string {
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		ch := query[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(ch)
	}
	return b.String()
}

// migration is one versioned schema change: migrations/<dialect>/NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations lists the dialect's embedded migrations in version order.
func (d *dialect) migrations() ([]migration, error) {
	dir := path.Join("migrations", d.name)
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		digits, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(digits)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number", e.Name())
		}
		body, err := fs.ReadFile(migrationFiles, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", ms[i-1].name, ms[i].name, ms[i].version)
		}
	}
	return ms, nil
}

// migrate applies, each in its own transaction, every migration db has not
// recorded in schema_migrations. It refuses a database migrated by a newer
// binary. Each transaction re-reads the recorded versions after taking the
// write lock, so two processes opening the same file at once apply each
// migration once.
func migrate(ctx context.Context, db *sql.DB, d *dialect) error {
	ms, err := d.migrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := createMigrationsTable(ctx, db, d); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].version
	}
	for _, m := range ms {
		if err := applyMigration(ctx, db, d, m, latest); err != nil {
			return fmt.Errorf("migrate: %s: %w", m.name, err)
		}
	}
	return nil
}

// createMigrationsTable creates schema_migrations unless it exists, under
// the dialect's migration lock (PostgreSQL's CREATE TABLE IF NOT EXISTS is
// not safe against a concurrent create). SQLite needs no lock and runs the
// statement on its own, as it always has.
func createMigrationsTable(ctx context.Context, db *sql.DB, d *dialect) (err error) {
	const create = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER NOT NULL PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at BIGINT  NOT NULL
)`
	if d.migrationLock == "" {
		_, err := db.ExecContext(ctx, create)
		return err
	}
	tx, err := beginMigration(ctx, db, d)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, create); err != nil {
		return err
	}
	return tx.Commit()
}

// beginMigration starts a transaction holding the dialect's migration lock.
func beginMigration(ctx context.Context, db *sql.DB, d *dialect) (*sql.Tx, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if d.migrationLock != "" {
		if _, err := tx.ExecContext(ctx, d.migrationLock); err != nil {
			tx.Rollback()
			return nil, fmt.Errorf("take migration lock: %w", err)
		}
	}
	return tx, nil
}

func applyMigration(ctx context.Context, db *sql.DB, d *dialect, m migration, latest int) (err error) {
	tx, err := beginMigration(ctx, db, d)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var applied sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&applied); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if int(applied.Int64) > latest {
		return fmt.Errorf("database schema version %d is newer than this binary knows (%d): run a newer sluice against this database", applied.Int64, latest)
	}
	var done int
	if err := tx.QueryRowContext(ctx, d.q(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), m.version).Scan(&done); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if done > 0 {
		return tx.Rollback()
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
		m.version, m.name, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("record version: %w", err)
	}
	return tx.Commit()
}
