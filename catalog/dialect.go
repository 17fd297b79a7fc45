package catalog

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/migrate"
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

// migrations lists the dialect's embedded migrations,
// migrations/<dialect>/NNNN_name.sql, in version order.
func (d *dialect) migrations() ([]migrate.Migration, error) {
	return migrate.Load(migrationFiles, path.Join("migrations", d.name))
}

// migrateOptions is how the catalog records its versions: in
// schema_migrations, applied_at in Unix nanoseconds, each migration under
// the dialect's migration lock.
func (d *dialect) migrateOptions() migrate.Options {
	opts := migrate.Options{
		Table: "schema_migrations",
		CreateTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER NOT NULL PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at BIGINT  NOT NULL
)`,
		DollarPlaceholders: d.rebind != nil,
		AppliedAt:          func() any { return time.Now().UnixNano() },
	}
	if d.migrationLock != "" {
		opts.Begin = []string{d.migrationLock}
	}
	return opts
}

// migrateSchema applies every migration db has not recorded in
// schema_migrations, each in its own transaction, and refuses a database
// migrated by a newer binary. Each transaction re-reads the recorded
// versions after taking the write lock, so two processes opening the same
// database at once apply each migration once.
func migrateSchema(ctx context.Context, db *sql.DB, d *dialect) error {
	ms, err := d.migrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := migrate.Run(ctx, db, ms, d.migrateOptions()); err != nil {
		if _, ok := errors.AsType[*migrate.TooNewError](err); ok {
			return fmt.Errorf("migrate: %w: run a newer sluice against this database", err)
		}
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
