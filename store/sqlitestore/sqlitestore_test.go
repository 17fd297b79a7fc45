package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/sqlitestore"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(t.TempDir(), "store.db")})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformance_HoldSettlements(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(t.TempDir(), "store.db"), HoldSettlements: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// SettleAsync calls done once the settlement is committed (it is there
// after a reopen), and at once with an error after Close.
func TestSettleAsync_DoneAfterCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	rules := []sluice.Rule{{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace",
		Metric: sluice.MetricTokens, Limit: 1 << 40, Period: sluice.PeriodDay}}
	id := sluice.Identity{Workspace: "w"}
	open := func() (*sqlitestore.Store, *sluice.Limiter) {
		s, err := sqlitestore.Open(sqlitestore.Options{Path: path, HoldSettlements: true})
		if err != nil {
			t.Fatal(err)
		}
		l, err := sluice.New(sluice.Options{Store: s, Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		return s, l
	}
	ctx := context.Background()
	s, l := open()
	r, err := l.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	r.SettleAsync(ctx, sluice.Usage{InputTokens: 7}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatalf("settle: %v", err)
	}
	r2, err := l.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r2.SettleAsync(ctx, sluice.Usage{InputTokens: 1}, func(err error) { done <- err })
	if err := <-done; err == nil {
		t.Fatal("settle after Close: no error")
	}

	// Reopened, the store counts the settled 7 and the 100 of the
	// reservation left open by the Close (charged by the restart).
	s, l = open()
	defer s.Close()
	eff, err := l.Effective(ctx, id)
	if err != nil || len(eff) != 1 {
		t.Fatalf("effective: %v %v", eff, err)
	}
	if eff[0].Used != 107 {
		t.Fatalf("used %d after reopening, want 107", eff[0].Used)
	}
}
