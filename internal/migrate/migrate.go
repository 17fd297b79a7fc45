// Package migrate applies versioned SQL migrations to a database: the one
// runner of the catalog (SQLite or PostgreSQL) and of store/pgstore.
//
// A migration is a file NNNN_name.sql; its version is NNNN. Run applies, in
// version order and each in its own transaction, the migrations a database
// has not recorded in its versions table, and refuses a database migrated
// by newer code. Each transaction takes the caller's lock and re-reads the
// recorded versions under it, so processes migrating one database at once
// apply each migration once.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one versioned schema change.
type Migration struct {
	Version int
	// Name is the file's name, recorded beside the version.
	Name string
	SQL  string
}

// Load reads the migrations in dir of fsys (every *.sql file) in version
// order. A name that does not start with a positive version, or two files
// with one version, is an error.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		digits, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(digits)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number", e.Name())
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", ms[i-1].Name, ms[i].Name, ms[i].Version)
		}
	}
	return ms, nil
}

// Latest returns the highest version of ms, sorted as Load returns them; 0
// when there are none.
func Latest(ms []Migration) int {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Options says how one database records its versions and serialises its
// migrators.
type Options struct {
	// Table records the versions applied, with columns version, name and
	// applied_at.
	Table string
	// CreateTable creates Table unless it exists (CREATE TABLE IF NOT
	// EXISTS ...).
	CreateTable string
	// Begin is run first, in order, in every transaction Run opens: it
	// takes the lock that serialises processes migrating the same database
	// (PostgreSQL's pg_advisory_xact_lock). Empty, Run takes no lock of its
	// own and creates Table outside a transaction: SQLite's transactions
	// take the database's write lock when they first write.
	Begin []string
	// DollarPlaceholders numbers the parameters $1, $2 (PostgreSQL); false,
	// they are ? (SQLite).
	DollarPlaceholders bool
	// AppliedAt, when set, returns the value recorded in applied_at; nil
	// leaves the column to its default.
	AppliedAt func() any
}

// TooNewError is Run's refusal of a database migrated by newer code: it
// records a version above the latest this code knows. Run changes nothing
// in such a database.
type TooNewError struct {
	// Applied is the database's highest recorded version, Latest the
	// highest this code knows.
	Applied, Latest int
}

func (e *TooNewError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this code knows (%d)", e.Applied, e.Latest)
}

// Run applies to db, each in its own transaction, every migration of ms
// (sorted as Load returns them) that db has not recorded in opts.Table,
// creating that table first if needed. A database at a version above
// Latest(ms) is refused with a *TooNewError.
func Run(ctx context.Context, db *sql.DB, ms []Migration, opts Options) error {
	if err := createTable(ctx, db, opts); err != nil {
		return fmt.Errorf("create %s: %w", opts.Table, err)
	}
	latest := Latest(ms)
	for _, m := range ms {
		if err := apply(ctx, db, m, latest, opts); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	return nil
}

// createTable creates the versions table, under the lock when there is one:
// PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe against a concurrent
// create.
func createTable(ctx context.Context, db *sql.DB, opts Options) error {
	if len(opts.Begin) == 0 {
		_, err := db.ExecContext(ctx, opts.CreateTable)
		return err
	}
	tx, err := begin(ctx, db, opts)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, opts.CreateTable); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// begin starts a transaction and runs opts.Begin in it.
func begin(ctx context.Context, db *sql.DB, opts Options) (*sql.Tx, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, stmt := range opts.Begin {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			tx.Rollback()
			return nil, fmt.Errorf("take the migration lock: %w", err)
		}
	}
	return tx, nil
}

// apply runs m in its own transaction unless the database has recorded it.
func apply(ctx context.Context, db *sql.DB, m Migration, latest int, opts Options) (err error) {
	tx, err := begin(ctx, db, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var applied sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM `+opts.Table).Scan(&applied); err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if int(applied.Int64) > latest {
		return &TooNewError{Applied: int(applied.Int64), Latest: latest}
	}
	var done int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+opts.Table+` WHERE version = `+placeholder(opts, 1), m.Version).Scan(&done); err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if done > 0 {
		return tx.Rollback()
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return err
	}
	record := `INSERT INTO ` + opts.Table + ` (version, name) VALUES (` + placeholder(opts, 1) + `, ` + placeholder(opts, 2) + `)`
	args := []any{m.Version, m.Name}
	if opts.AppliedAt != nil {
		record = `INSERT INTO ` + opts.Table + ` (version, name, applied_at) VALUES (` +
			placeholder(opts, 1) + `, ` + placeholder(opts, 2) + `, ` + placeholder(opts, 3) + `)`
		args = append(args, opts.AppliedAt())
	}
	if _, err := tx.ExecContext(ctx, record, args...); err != nil {
		return fmt.Errorf("record version: %w", err)
	}
	return tx.Commit()
}

// placeholder returns the database's name for the nth parameter.
func placeholder(opts Options, n int) string {
	if opts.DollarPlaceholders {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}
