package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	_ "modernc.org/sqlite"

	"github.com/sluicehq/sluice/internal/migrate"
)

var sqliteOptions = migrate.Options{
	Table:       "versions",
	CreateTable: `CREATE TABLE IF NOT EXISTS versions (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL DEFAULT 0)`,
}

func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func recorded(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM versions ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

func TestLoad_OrdersByVersionAndRejectsBadNames(t *testing.T) {
	ms, err := migrate.Load(fstest.MapFS{
		"m/0010_late.sql":  {Data: []byte("SELECT 10")},
		"m/0002_early.sql": {Data: []byte("SELECT 2")},
		"m/README":         {Data: []byte("not a migration")},
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Name != "0002_early.sql" || ms[1].Version != 10 || migrate.Latest(ms) != 10 {
		t.Fatalf("Load = %+v", ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"positive version": {"m/init.sql": {}},
		"share version":    {"m/0001_a.sql": {}, "m/1_b.sql": {}},
		"read migrations":  {},
	} {
		if _, err := migrate.Load(fsys, "m"); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Load of a %q case: %v", name, err)
		}
	}
}

func TestRun_AppliesOnceRefusesNewerAndKeepsAFailureToItsMigration(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	ms := []migrate.Migration{
		{Version: 1, Name: "0001_a.sql", SQL: `CREATE TABLE a (x INTEGER)`},
		{Version: 2, Name: "0002_b.sql", SQL: `CREATE TABLE b (x INTEGER)`},
	}
	for range 2 { // the second run finds nothing to do
		if err := migrate.Run(ctx, db, ms, sqliteOptions); err != nil {
			t.Fatal(err)
		}
	}
	if got := recorded(t, db); len(got) != 2 {
		t.Fatalf("recorded %v", got)
	}

	// A failing migration is rolled back alone, its predecessors kept.
	bad := append(ms, migrate.Migration{Version: 3, Name: "0003_c.sql", SQL: `CREATE TABLE c (x INTEGER); CREATE TABLE a (x INTEGER)`})
	if err := migrate.Run(ctx, db, bad, sqliteOptions); err == nil || !strings.Contains(err.Error(), "0003_c.sql") {
		t.Fatalf("a failing migration: %v", err)
	}
	if got := recorded(t, db); len(got) != 2 {
		t.Fatalf("recorded after a failure %v", got)
	}
	if _, err := db.Exec(`SELECT x FROM c`); err == nil {
		t.Fatal("the failed migration's first statement was kept")
	}

	// Code that knows only version 1 refuses the database, untouched.
	err := migrate.Run(ctx, db, ms[:1], sqliteOptions)
	tooNew, ok := errors.AsType[*migrate.TooNewError](err)
	if !ok || tooNew.Applied != 2 || tooNew.Latest != 1 {
		t.Fatalf("older code on a newer database: %v", err)
	}
	if got := recorded(t, db); len(got) != 2 {
		t.Fatalf("recorded after a refusal %v", got)
	}
}

func TestRun_RecordsAppliedAt(t *testing.T) {
	db := openSQLite(t)
	opts := sqliteOptions
	opts.AppliedAt = func() any { return int64(42) }
	ms := []migrate.Migration{{Version: 1, Name: "0001_a.sql", SQL: `CREATE TABLE a (x INTEGER)`}}
	if err := migrate.Run(context.Background(), db, ms, opts); err != nil {
		t.Fatal(err)
	}
	var at int64
	if err := db.QueryRow(`SELECT applied_at FROM versions`).Scan(&at); err != nil || at != 42 {
		t.Fatalf("applied_at = %d, %v", at, err)
	}
}
