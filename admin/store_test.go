package admin

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/sqlitestore"
)

// TestMetricsStore_ListsOpenReservations: over memstore and sqlitestore,
// the store Metrics.Store returns settles asynchronously as the inner store
// does, and the admissions it lets through are listed as open with their
// charges until settled.
func TestMetricsStore_ListsOpenReservations(t *testing.T) {
	sq, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(t.TempDir(), "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	for name, inner := range map[string]sluice.Store{"memstore": memstore.New(memstore.Options{}), "sqlitestore": sq} {
		t.Run(name, func(t *testing.T) {
			m := NewMetrics(MetricsOptions{})
			s := m.Store(inner)
			if _, ok := s.(sluice.AsyncSettler); !ok {
				t.Fatalf("Metrics.Store(%T) = %T, not an AsyncSettler", inner, s)
			}
			l, err := sluice.New(sluice.Options{Store: s, Rules: baseRules[1:2]})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: "acme", User: "ada"}, Max: sluice.Usage{InputTokens: 40}})
			if err != nil {
				t.Fatal(err)
			}
			open := m.OpenReservations(time.Now())
			if len(open) != 1 || len(open[0].Charges) != 1 || open[0].Charges[0].Amount != 40 || open[0].Charges[0].Subject != "acme" ||
				open[0].Charges[0].Kind != sluice.KindBudget {
				t.Fatalf("open reservations %+v, want one budget charge of 40 on acme", open)
			}
			done := make(chan error, 1)
			r.SettleAsync(ctx, sluice.Usage{InputTokens: 10}, func(err error) { done <- err })
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if open := m.OpenReservations(time.Now()); len(open) != 0 {
				t.Fatalf("after settling, open reservations %+v", open)
			}
		})
	}
}
