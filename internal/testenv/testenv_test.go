package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestSkipLog_ReportNamesTheTestsAndHowToRunThem(t *testing.T) {
	postgres, redis := "set "+PostgresVar+"="+PostgresExample, "set "+RedisVar+"="+RedisExample
	for name, tc := range map[string]struct {
		skipped map[string][]string
		want    string
	}{
		"none": {nil, ""},
		"one": {map[string][]string{postgres: {"TestA/postgres"}},
			"testenv: example.com/p: 1 integration test skipped (TestA/postgres)\n" +
				"testenv: to run them, " + postgres + " (.ci/run does all of it)\n"},
		"both, many": {map[string][]string{
			postgres: {"T1", "T2", "T3", "T4", "T5"},
			redis:    {"T6", "T7", "T8", "T9", "T0"},
		}, "testenv: example.com/p: 10 integration tests skipped (T0, T1, T2, T3, T4, T5, T6, T7 and 2 more)\n" +
			"testenv: to run them, " + postgres + "; " + redis + " (.ci/run does all of it)\n"},
	} {
		t.Run(name, func(t *testing.T) {
			l := skipLog{pkg: "example.com/p"}
			for v, tests := range tc.skipped {
				for _, test := range tests {
					l.add(v, test)
					l.add(v, test) // a test skipped twice is listed once
				}
			}
			var out bytes.Buffer
			l.report(&out)
			if out.String() != tc.want {
				t.Fatalf("report:\n%s\nwant:\n%s", out.String(), tc.want)
			}
		})
	}
}

// TestMissing_SkipsAndReports: a test that lacks what it needs is skipped
// and recorded for the report, or fails when CI=true.
func TestMissing_SkipsAndReports(t *testing.T) {
	const how = "install the frobnicator"
	t.Setenv("CI", "")
	t.Run("lacking", func(t *testing.T) { Missing(t, "frobnicator is not installed", how) })
	skips.mu.Lock()
	recorded := skips.tests[how]
	delete(skips.tests, how) // not a skip of this package's
	skips.mu.Unlock()
	if want := []string{"TestMissing_SkipsAndReports/lacking"}; !slices.Equal(recorded, want) {
		t.Errorf("recorded %q, want %q", recorded, want)
	}
	t.Setenv("CI", "true")
	var fake fakeTB
	done := make(chan struct{})
	go func() {
		defer close(done)
		Missing(&fake, "frobnicator is not installed", how)
	}()
	<-done
	if !fake.failed || fake.skipped {
		t.Errorf("with CI=true: failed %v, skipped %v; want a failure", fake.failed, fake.skipped)
	}
}

// fakeTB records how a gate ended a test, which it ends as testing does,
// with runtime.Goexit.
type fakeTB struct {
	testing.TB
	failed, skipped bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Name() string          { return "fake" }
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true; runtime.Goexit() }
func (f *fakeTB) Skipf(string, ...any)  { f.skipped = true; runtime.Goexit() }

// TestOutputHidden: the report goes to the terminal too only when go test
// would not show the package's output: after a pass, without -v, and
// with stdout not a terminal.
func TestOutputHidden(t *testing.T) {
	r, pipe, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer pipe.Close()
	device, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer device.Close()
	for _, tc := range []struct {
		name    string
		code    int
		verbose bool
		stdout  *os.File
		hidden  bool
	}{
		{"go test ./... passes", 0, false, pipe, true},
		{"go test ./... fails: the output is shown", 1, false, pipe, false},
		{"go test -v", 0, true, pipe, false},
		{"go test in the package's directory: stdout is the terminal", 0, false, device, false},
	} {
		if got := outputHidden(tc.code, tc.verbose, tc.stdout); got != tc.hidden {
			t.Errorf("%s: outputHidden = %v, want %v", tc.name, got, tc.hidden)
		}
	}
}

// TestPackagePath: the report names the package under test.
func TestPackagePath(t *testing.T) {
	if got, want := packagePath(), "github.com/sluicehq/sluice/internal/testenv"; got != want {
		t.Errorf("packagePath() = %q, want %q", got, want)
	}
}

// TestPostgresURL_CreatesTheDatabase points the gate at a database that
// does not exist and checks that it is there afterwards.
func TestPostgresURL_CreatesTheDatabase(t *testing.T) {
	base := PostgresURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "testenv_" + hex.EncodeToString(b[:])
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	// Twice: the second finds it made.
	for i := range 2 {
		t.Setenv(PostgresVar, u.String())
		created.mu.Lock()
		delete(created.urls, u.String())
		created.mu.Unlock()
		got := PostgresURL(t)
		conn, err := pgx.Connect(ctx, got)
		if err != nil {
			t.Fatalf("connect after the gate, run %d: %v", i, err)
		}
		var db string
		err = conn.QueryRow(ctx, "SELECT current_database()").Scan(&db)
		conn.Close(ctx)
		if err != nil || db != name {
			t.Fatalf("current_database() = %q, %v; want %q", db, err, name)
		}
	}
}

func TestMain(m *testing.M) {
	os.Exit(Run(m))
}
