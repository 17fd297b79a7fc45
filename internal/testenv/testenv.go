// Package testenv is the one gate of the integration tests: those that need
// Redis, PostgreSQL or a tool (helm, chromium, promtool, the npm clients).
//
// Such a test calls RedisURL or PostgresURL first (Helm, or Missing when
// it finds its tool missing). The service's URL comes from
// SLUICE_TEST_REDIS_URL or SLUICE_TEST_POSTGRES_URL; unset, the test is
// skipped, unless CI=true, where a missing service is a failure. Each
// package using the gate runs its tests through Run in its TestMain, which
// ends the package's output with the integration tests it skipped and what
// runs them, and says so on the terminal too when go test would not show
// that output (see Run).
package testenv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	neturl "net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The variables that name the services, and the URL each takes on a
// developer's machine (the one .ci/run sets).
const (
	RedisVar        = "SLUICE_TEST_REDIS_URL"
	RedisExample    = "redis://127.0.0.1:6379/0"
	PostgresVar     = "SLUICE_TEST_POSTGRES_URL"
	PostgresExample = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// RedisURL returns SLUICE_TEST_REDIS_URL. Unset, tb is skipped, unless
// CI=true, where it fails.
func RedisURL(tb testing.TB) string {
	tb.Helper()
	return lookup(tb, RedisVar)
}

// PostgresURL returns SLUICE_TEST_POSTGRES_URL, after creating the database
// it names when that does not exist yet, so that no test depends on the
// database's name, with its search_path set to a schema of the test
// process's own (made here, dropped by Run), so that the tests of packages
// run at once, or of two checkouts of different versions, never share
// tables. A URL that sets search_path itself keeps it. Unset, tb is
// skipped, unless CI=true, where it fails.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	url := lookup(tb, PostgresVar)
	if err := ensureDatabase(url); err != nil {
		tb.Fatalf("testenv: %s: %v", PostgresVar, err)
	}
	own, err := processSchema(url)
	if err != nil {
		tb.Fatalf("testenv: %s: %v", PostgresVar, err)
	}
	return own
}

// schemas are the test process's own schemas, one per database URL, made
// by the first PostgresURL for that URL.
var schemas struct {
	mu  sync.Mutex
	own map[string]ownSchema // by base URL
}

type ownSchema struct{ name, url string }

// processSchema returns base with search_path set to the process's schema
// in base's database, making it the first time.
func processSchema(base string) (string, error) {
	schemas.mu.Lock()
	defer schemas.mu.Unlock()
	if s, ok := schemas.own[base]; ok {
		return s.url, nil
	}
	u, err := neturl.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Query().Has("search_path") {
		return base, nil // not a URL this can extend: used as it is
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("t_proc_%d_%x", os.Getpid(), b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema %s: %w", name, err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	if schemas.own == nil {
		schemas.own = map[string]ownSchema{}
	}
	schemas.own[base] = ownSchema{name: name, url: u.String()}
	return u.String(), nil
}

// dropSchemas drops the schemas the process made.
func dropSchemas() error {
	schemas.mu.Lock()
	defer schemas.mu.Unlock()
	var errs []error
	for base, s := range schemas.own {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		conn, err := pgx.Connect(ctx, base)
		if err == nil {
			_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.name}.Sanitize()+" CASCADE")
			conn.Close(ctx)
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("drop the tests' schema %s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

func lookup(tb testing.TB, name string) string {
	tb.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	Missing(tb, name+" is not set", "set "+name+"="+example(name))
	return ""
}

// Missing is the gate of a test that lacks what it needs (a service, a
// tool): missing says what ("promtool is not installed"), how what gives
// it ("install Debian's prometheus package"). tb is skipped, and Run
// reports it, unless CI=true, where it fails: .ci/run provides everything.
func Missing(tb testing.TB, missing, how string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s and CI=true: the integration tests must run in CI (.ci/run provides what they need)", missing)
	}
	skips.add(how, tb.Name())
	tb.Skipf("%s: %s to run it", missing, how)
}

// example is a value for the variable name, as a developer would set it.
func example(name string) string {
	switch name {
	case RedisVar:
		return RedisExample
	case PostgresVar:
		return PostgresExample
	}
	return HelmExample
}

// Run runs the package's tests, then reports which of them the gate
// skipped and how to run them; it returns m.Run's exit code. A package's
// TestMain calls os.Exit(testenv.Run(m)).
//
// The report ends the package's output. go test shows that output only
// with -v, for a package that fails, or when it tests the current
// directory; otherwise, after a pass, the report is written to the
// terminal (/dev/tty) as well, which go test does not capture, so that
// go test ./... without the services says what it skipped. Without a
// terminal (CI, a pipe from cron) there is nothing more. A result go
// test takes from its cache runs nothing, so reports nothing: -count=1
// runs it again.
func Run(m *testing.M) int {
	code := m.Run()
	if err := dropSchemas(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
	}
	skips.report(os.Stdout)
	if outputHidden(code, testing.Verbose(), os.Stdout) {
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			skips.report(tty)
			tty.Close()
		}
	}
	return code
}

// outputHidden reports whether go test hides what the test binary writes
// to stdout: after a pass (code 0), without -v (or -json, which implies
// it), unless stdout is a character device, the terminal go test hands
// the tests of the current directory (or /dev/null).
func outputHidden(code int, verbose bool, stdout *os.File) bool {
	if code != 0 || verbose {
		return false
	}
	info, err := stdout.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice == 0
}

// skips records the tests the gate skipped, by what would run them, and
// names the package they are in. Tests run in parallel, so
// it is locked.
var skips = skipLog{pkg: packagePath()}

type skipLog struct {
	pkg   string
	mu    sync.Mutex
	tests map[string][]string // by how to run them
}

// packagePath is the import path of the package under test, from the test
// binary's build information (whose path ends in ".test"), or the
// binary's name when it has none.
func packagePath() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Path != "" {
		return strings.TrimSuffix(info.Path, ".test")
	}
	return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
}

func (l *skipLog) add(how, test string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tests == nil {
		l.tests = map[string][]string{}
	}
	if !slices.Contains(l.tests[how], test) {
		l.tests[how] = append(l.tests[how], test)
	}
}

// maxNames bounds the test names the summary lists.
const maxNames = 8

// report writes, when any test was skipped, a summary such as
//
//	testenv: github.com/sluicehq/sluice/catalog: 3 integration tests skipped (TestA, TestB, TestC)
//	testenv: to run them, set SLUICE_TEST_POSTGRES_URL=postgres://... (.ci/run does all of it)
func (l *skipLog) report(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tests) == 0 {
		return
	}
	hows := slices.Sorted(maps.Keys(l.tests))
	var names []string
	for _, how := range hows {
		names = append(names, l.tests[how]...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	listed := strings.Join(names[:min(len(names), maxNames)], ", ")
	if len(names) > maxNames {
		listed += fmt.Sprintf(" and %d more", len(names)-maxNames)
	}
	noun := "tests"
	if len(names) == 1 {
		noun = "test"
	}
	fmt.Fprintf(w, "testenv: %s: %d integration %s skipped (%s)\n", l.pkg, len(names), noun, listed)
	fmt.Fprintf(w, "testenv: to run them, %s (.ci/run does all of it)\n", strings.Join(hows, "; "))
}

// created remembers the databases this process has made sure of.
var created struct {
	mu   sync.Mutex
	urls map[string]bool
}

// ensureDatabase creates the database url names unless it exists, from the
// server's maintenance database "postgres". Test binaries of several
// packages may race to create it: the loser finds it made.
func ensureDatabase(url string) error {
	created.mu.Lock()
	defer created.mu.Unlock()
	if created.urls[url] {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		conn.Close(ctx)
	} else {
		if !isCode(err, "3D000") { // invalid_catalog_name: no such database
			return fmt.Errorf("connect: %w", err)
		}
		if err := createDatabase(ctx, cfg); err != nil {
			return err
		}
	}
	if created.urls == nil {
		created.urls = map[string]bool{}
	}
	created.urls[url] = true
	return nil
}

func createDatabase(ctx context.Context, cfg *pgx.ConnConfig) error {
	maintenance := cfg.Copy()
	maintenance.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, maintenance)
	if err != nil {
		return fmt.Errorf("connect to the maintenance database to create %q: %w", cfg.Database, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize())
	// 42P04 duplicate_database, or 23505 when two creators race on the
	// catalog's unique index: another test binary made it first.
	if err != nil && !isCode(err, "42P04") && !isCode(err, "23505") {
		return fmt.Errorf("create database %q: %w", cfg.Database, err)
	}
	return nil
}

func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}
