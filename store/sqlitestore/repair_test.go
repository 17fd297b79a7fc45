package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/counter"
	"github.com/sluicehq/sluice/store/sqlitestore"
)

// budgetFile is a store file with one budget per workspace, and what reads
// its usage.
type budgetFile struct {
	t    *testing.T
	path string
	now  time.Time
	log  bytes.Buffer
}

var dailyRule = sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace",
	Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}

func (f *budgetFile) open() (*sqlitestore.Store, *sluice.Limiter) {
	f.t.Helper()
	s, err := sqlitestore.Open(sqlitestore.Options{Path: f.path, Logger: slog.New(slog.NewTextHandler(&f.log, nil))})
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	l, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{dailyRule}})
	if err != nil {
		f.t.Fatal(err)
	}
	return s, l
}

func (f *budgetFile) used(l *sluice.Limiter, ws string) int64 {
	f.t.Helper()
	eff, err := l.Effective(context.Background(), sluice.Identity{Workspace: ws})
	if err != nil || len(eff) != 1 {
		f.t.Fatalf("effective: %v %v", eff, err)
	}
	return eff[0].Used
}

// exec runs SQL on the closed store's file, as a hand (or an older
// version) would.
func (f *budgetFile) exec(query string, args ...any) {
	f.t.Helper()
	db, err := sql.Open("sqlite", f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(query, args...); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
}

// A file that holds a REAL or a negative usage (what the journal wrote
// before it saturated, after a provider reported 2^63-1 tokens) opens: each
// bad counter is repaired to the ceiling, spent until its period ends, with
// one warning naming it; a good counter is left as it was.
func TestOpen_RepairsBadUsage(t *testing.T) {
	f := &budgetFile{t: t, path: filepath.Join(t.TempDir(), "store.db")}
	s, l := f.open()
	ctx := context.Background()
	for _, ws := range []string{"real", "negative", "huge", "good"} {
		r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: ws}, Max: sluice.Usage{InputTokens: 100}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Settle(ctx, sluice.Usage{InputTokens: 40}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.exec(`UPDATE budget_usage SET used = 9.2233720368547758e18 WHERE subject = 'real'`)
	f.exec(`UPDATE budget_usage SET used = -9223372036854412069 WHERE subject = 'negative'`)
	f.exec(`UPDATE budget_usage SET used = ? WHERE subject = 'huge'`, int64(math.MaxInt64))

	s, l = f.open()
	defer s.Close()
	for _, ws := range []string{"real", "negative", "huge"} {
		if got := f.used(l, ws); got != counter.Ceiling {
			t.Errorf("%s: used %d after repair, want the ceiling %d", ws, got, int64(counter.Ceiling))
		}
		_, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: ws}, Max: sluice.Usage{InputTokens: 1}})
		if !errors.Is(err, sluice.ErrBudgetExhausted) {
			t.Errorf("%s: admit after repair: %v, want the budget spent", ws, err)
		}
	}
	if got := f.used(l, "good"); got != 40 {
		t.Errorf("good: used %d, want 40 untouched", got)
	}
	logged := f.log.String()
	if n := strings.Count(logged, "budget counter out of bounds"); n != 3 {
		t.Fatalf("%d warnings, want one per bad counter:\n%s", n, logged)
	}
	for _, want := range []string{"subject=real", "subject=negative", "subject=huge", "used=-9223372036854412069"} {
		if !strings.Contains(logged, want) {
			t.Errorf("warnings do not name %s:\n%s", want, logged)
		}
	}
	if strings.Contains(logged, "subject=good") {
		t.Errorf("a good counter was warned about:\n%s", logged)
	}
}

// The journal saturates: a settlement of 2^63-1 given to the store (past
// the Limiter's own ceiling), added to a usage just below the ceiling in
// another commit, leaves an INTEGER at the ceiling, which the next Open
// reads without a repair.
func TestJournal_SaturatesAtCeiling(t *testing.T) {
	f := &budgetFile{t: t, path: filepath.Join(t.TempDir(), "store.db")}
	s, _ := f.open()
	ctx := context.Background()
	now := time.Now()
	start, end := sluice.PeriodBounds(sluice.PeriodDay, now, time.UTC)
	for i, actual := range []int64{counter.Ceiling - 1, math.MaxInt64} {
		b := &sluice.Batch{ID: uint64(i + 1), Deadline: now.Add(time.Minute), Charges: []sluice.Charge{{
			Key:  sluice.CounterKey{Rule: 7, Subject: "w", Period: start.Unix()},
			Kind: sluice.KindBudget, Limit: math.MaxInt64, PeriodEnd: end, Amount: 1,
		}}}
		now = now.Add(time.Nanosecond)
		if ok, err := s.Admit(ctx, now, *b, make([]sluice.ChargeResult, 1)); !ok || err != nil {
			t.Fatalf("admit %d: %v %v", i, ok, err)
		}
		b.Charges[0].Actual = actual
		if err := s.Settle(ctx, now, *b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", f.path)
	if err != nil {
		t.Fatal(err)
	}
	var kind string
	var used int64
	if err := db.QueryRow(`SELECT typeof(used), used FROM budget_usage WHERE subject = 'w'`).Scan(&kind, &used); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if kind != "integer" || used != counter.Ceiling {
		t.Fatalf("journaled used %d (%s), want the integer %d", used, kind, int64(counter.Ceiling))
	}
	s, _ = f.open()
	s.Close()
	if f.log.Len() != 0 {
		t.Fatalf("a saturated journal needed a repair:\n%s", f.log.String())
	}
}
