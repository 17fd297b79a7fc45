package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		digits, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(digits)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number", e.Name())
		}
		body, err := fs.ReadFile(migrationFiles, "migrations/"+e.Name())
		if err != nil {
			return nil, err
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

// LatestVersion is the schema version this code migrates to.
func LatestVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate brings the store's schema in pool's database (the first schema of
// its search_path) to LatestVersion, in one transaction under an advisory
// lock, so that replicas starting together migrate once and the others wait
// and find nothing to do. A schema newer than this code is refused with
// ErrSchemaTooNew and left untouched.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrate(ctx, pool); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The store's connections carry a short statement_timeout; waiting
		// for another replica's migration must not trip it.
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+migrationsTable+` (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return fmt.Errorf("create %s: %w", migrationsTable, err)
		}
		applied, err := appliedVersion(ctx, tx)
		if err != nil {
			return err
		}
		latest := 0
		if len(ms) > 0 {
			latest = ms[len(ms)-1].version
		}
		if applied > latest {
			return fmt.Errorf("%w: the database is at version %d, this code knows up to %d; upgrade sluice or use another database",
				ErrSchemaTooNew, applied, latest)
		}
		for _, m := range ms {
			if m.version <= applied {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+migrationsTable+` (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return fmt.Errorf("%s: record version: %w", m.name, err)
			}
		}
		return nil
	})
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
