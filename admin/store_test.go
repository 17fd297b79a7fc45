package admin

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/sqlitestore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestMetricsStore_ListsOpenReservations: over memstore and sqlitestore,
// the store Metrics.Store returns settles asynchronously as the inner store
// does, and the admissions it lets through are listed as open with their
// charges until settled: from the store, which lists them, or from this
// process's own record over a store that cannot.
func TestMetricsStore_ListsOpenReservations(t *testing.T) {
	sq, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(t.TempDir(), "store.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	for name, tc := range map[string]struct {
		inner  sluice.Store
		source string
	}{
		"memstore":    {memstore.New(memstore.Options{}), FromStore},
		"sqlitestore": {sq, FromStore},
		"no listing":  {struct{ sluice.Store }{memstore.New(memstore.Options{})}, FromProcess},
	} {
		t.Run(name, func(t *testing.T) {
			m := NewMetrics(MetricsOptions{})
			s := m.Store(tc.inner)
			if _, ok := s.(sluice.AsyncSettler); !ok {
				t.Fatalf("Metrics.Store(%T) = %T, not an AsyncSettler", tc.inner, s)
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
			list, err := m.Reservations(ctx, time.Now(), 10, nil)
			if err != nil {
				t.Fatal(err)
			}
			open := list.Reservations
			if list.Source != tc.source || len(open) != 1 || open[0].ID != r.ID() || open[0].Admitted.IsZero() ||
				len(open[0].Charges) != 1 || open[0].Charges[0].Amount != 40 || open[0].Charges[0].Subject != "acme" ||
				open[0].Charges[0].Kind != sluice.KindBudget {
				t.Fatalf("open reservations %+v, want one budget charge of 40 on acme, admitted here, from the %s", list, tc.source)
			}
			done := make(chan error, 1)
			r.SettleAsync(ctx, sluice.Usage{InputTokens: 10}, func(err error) { done <- err })
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if list, err := m.Reservations(ctx, time.Now(), 10, nil); err != nil || len(list.Reservations) != 0 {
				t.Fatalf("after settling, open reservations %+v, %v", list, err)
			}
		})
	}
}

// TestMetricsStore_RenewsLeases: the store Metrics.Store returns renews
// leases when the inner store does (and only then, so that a Limiter over
// one that cannot keeps the model deadline), and a call renewed past its
// first lease stays in flight.
func TestMetricsStore_RenewsLeases(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	if _, ok := m.Store(struct{ sluice.Store }{memstore.New(memstore.Options{})}).(sluice.LeaseRenewer); ok {
		t.Fatal("Metrics.Store over a store that cannot renew is a LeaseRenewer")
	}
	m = NewMetrics(MetricsOptions{})
	s := m.Store(memstore.New(memstore.Options{}))
	_, async := s.(sluice.AsyncSettler)
	_, reports := s.(sluice.SweepReporter)
	if _, renews := s.(sluice.LeaseRenewer); !renews || !async || !reports {
		t.Fatalf("Metrics.Store(memstore) = %T: renews %v, settles asynchronously %v, reports sweeps %v", s, renews, async, reports)
	}
	clock := storetest.NewClock(storetest.Start)
	l, err := sluice.New(sluice.Options{Store: s, Clock: clock, Rules: baseRules[1:2], LeaseTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: "acme", User: "ada"}, Max: sluice.Usage{InputTokens: 40}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second)
	if err := l.RenewLeases(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(40 * time.Second) // past the first lease, before the renewed one
	if res, err := l.Sweep(ctx); err != nil || res.Reservations != 0 {
		t.Fatalf("sweep = %+v, %v; want nothing swept", res, err)
	}
	if n := m.storesSnapshot()[0].inFlight(); n != 1 {
		t.Fatalf("%d calls in flight, want the renewed one", n)
	}
}
