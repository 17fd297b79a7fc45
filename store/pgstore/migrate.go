package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sluicehq/sluice/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationsTable records the versions applied. It is not called
// schema_migrations because the catalog keeps its own versions under that
// name, possibly in the same database and schema.
const migrationsTable = "sluice_store_schema_migrations"

// migrateLock is the pg_advisory_xact_lock key that serializes migrations
// of the store's schema across replicas starting together ("sluice" plus 1).
const migrateLock int64 = 0x736c756963650001

// ErrSchemaTooNew is returned by Open, Migrate and CheckSchema for a database
// migrated by newer code than this.
var ErrSchemaTooNew = errors.New("database schema is newer than this code")

// ErrSchemaTooOld is returned by CheckSchema (and Open with NoMigrate) for a
// database that needs migrating.
var ErrSchemaTooOld = errors.New("database schema is older than this code; run sluice migrate")

// migrations returns the embedded migrations in version order.
func migrations() ([]migrate.Migration, error) {
	return migrate.Load(migrationFiles, "migrations")
}

// migrateOptions is how the store records its versions: in migrationsTable,
// each migration under the advisory lock, with the connections' short
// statement_timeout lifted so that waiting for another replica's migration
// does not trip it.
var migrateOptions = migrate.Options{
	Table: migrationsTable,
	CreateTable: `CREATE TABLE IF NOT EXISTS ` + migrationsTable + ` (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`,
	Begin: []string{
		"SET LOCAL statement_timeout = 0",
		"SELECT pg_advisory_xact_lock(" + strconv.FormatInt(migrateLock, 10) + ")",
	},
	DollarPlaceholders: true,
}

// LatestVersion is the schema version this code migrates to.
func LatestVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return migrate.Latest(ms)
}

// Migrate brings the store's schema in pool's database (the first schema of
// its search_path) to LatestVersion, each migration in its own transaction
// under an advisory lock, so that replicas starting together apply each
// migration once and the others wait and find nothing to do. A schema newer
// than this code is refused with ErrSchemaTooNew and left untouched.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrateSchema(ctx, pool); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

func migrateSchema(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	err = migrate.Run(ctx, db, ms, migrateOptions)
	if tooNew, ok := errors.AsType[*migrate.TooNewError](err); ok {
		return fmt.Errorf("%w: the database is at version %d, this code knows up to %d; upgrade sluice or use another database",
			ErrSchemaTooNew, tooNew.Applied, tooNew.Latest)
	}
	return err
}

// CheckSchema reports whether pool's database holds exactly the schema
// version this code uses: ErrSchemaTooOld when it needs migrating,
// ErrSchemaTooNew when newer code migrated it.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if err := checkSchema(ctx, pool); err != nil {
		return fmt.Errorf("pgstore: check schema: %w", err)
	}
	return nil
}

func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	latest := LatestVersion()
	var applied int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", migrationsTable).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return nil
		}
		var err error
		applied, err = appliedVersion(ctx, tx)
		return err
	})
	switch {
	case err != nil:
		return err
	case applied > latest:
		return fmt.Errorf("%w: the database is at version %d, this code knows up to %d", ErrSchemaTooNew, applied, latest)
	case applied < latest:
		return fmt.Errorf("%w: the database is at version %d, this code needs %d", ErrSchemaTooOld, applied, latest)
	}
	return nil
}

func appliedVersion(ctx context.Context, tx pgx.Tx) (int, error) {
	var applied int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+migrationsTable).Scan(&applied); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	return applied, nil
}

// createSchema creates a PostgreSQL schema if missing. The advisory lock
// keeps replicas starting together from racing on the catalog.
func createSchema(ctx context.Context, pool *pgxpool.Pool, name string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create schema %q: %w", name, err)
		}
		return nil
	})
}
