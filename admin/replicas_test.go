package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/pgstore"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestAPI_ReservationsAcrossReplicas: two replicas, each its own limiter,
// admin API and connections to one shared store (PostgreSQL, Redis), each
// list the reservation the other admitted, read from the store, until it is
// released; the admission time is known for a replica's own only.
func TestAPI_ReservationsAcrossReplicas(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) sluice.Store{
		"postgres": func(t *testing.T) sluice.Store {
			s, err := pgstore.Open(context.Background(), pgstore.Options{URL: testenv.PostgresURL(t), MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"redis": func() func(t *testing.T) sluice.Store {
			prefix := fmt.Sprintf("sluice-admin-test-%d-%d", os.Getpid(), time.Now().UnixNano())
			return func(t *testing.T) sluice.Store {
				s, err := redisstore.Open(context.Background(), redisstore.Options{URL: testenv.RedisURL(t), Prefix: prefix, Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			a, b := newEnvOn(t, open(t)), newEnvOn(t, open(t))
			ctx := context.Background()
			ours, err := a.limiter.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: "acme", User: "ada"}, Max: sluice.Usage{InputTokens: 700}})
			if err != nil {
				t.Fatal(err)
			}
			defer ours.Release(ctx)
			theirs, err := b.limiter.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: "globex", User: "bob"}, Max: sluice.Usage{InputTokens: 200}})
			if err != nil {
				t.Fatal(err)
			}
			defer theirs.Release(ctx)
			// The charges the store records: the workspace's budget and the
			// server's lease (the rate charge holds nothing).
			want := map[uint64][]ReservationCharge{
				ours.ID(): {{Rule: "daily_token_budget", Metric: "tokens", Kind: sluice.KindBudget, Subject: "acme", Amount: 700},
					{Rule: "max_in_flight", Metric: "concurrency", Kind: sluice.KindConcurrency, Subject: "test", Amount: 1}},
				theirs.ID(): {{Rule: "daily_token_budget", Metric: "tokens", Kind: sluice.KindBudget, Subject: "globex", Amount: 200},
					{Rule: "max_in_flight", Metric: "concurrency", Kind: sluice.KindConcurrency, Subject: "test", Amount: 1}},
			}
			own := map[*env]uint64{a: ours.ID(), b: theirs.ID()}
			check := func(e *env, open ...*sluice.Reservation) {
				t.Helper()
				list := e.reservations("")
				if list.Source != FromStore || list.Truncated || len(list.Reservations) != len(open) {
					t.Fatalf("reservations = %+v, want %d from the store", list, len(open))
				}
				for _, r := range list.Reservations {
					if !slices.ContainsFunc(open, func(o *sluice.Reservation) bool { return o.ID() == r.ID }) {
						t.Fatalf("reservations list %d, want %v", r.ID, want)
					}
					slices.SortFunc(r.Charges, func(x, y ReservationCharge) int { return cmp.Compare(x.Kind, y.Kind) })
					if !slices.Equal(r.Charges, want[r.ID]) {
						t.Errorf("reservation %d charges %+v, want %+v", r.ID, r.Charges, want[r.ID])
					}
					if mine := r.ID == own[e]; mine == r.Admitted.IsZero() || mine != (r.Age != nil) {
						t.Errorf("reservation %d admitted %v, age %v: want them only on the replica that admitted it", r.ID, r.Admitted, r.Age)
					}
				}
			}
			for _, e := range []*env{a, b} {
				check(e, ours, theirs)
				if cut := e.reservations("?limit=1"); len(cut.Reservations) != 1 || !cut.Truncated {
					t.Fatalf("reservations?limit=1 = %+v, want one and truncated", cut)
				}
			}
			for _, query := range []string{"?limit=0", "?limit=1001", "?limit=ten", "?workspace=acme"} {
				if r := a.do("GET", "/admin/v1/reservations"+query, rootToken, nil); r.status != http.StatusBadRequest {
					t.Errorf("reservations%s = %d %s, want 400", query, r.status, r.raw)
				}
			}
			// The console's page lists the other replica's too.
			br := a.browser()
			br.login(rootToken)
			if status, page := br.get("/ui/reservations"); status != http.StatusOK || !strings.Contains(page, "another replica") ||
				!strings.Contains(page, strconv.FormatUint(theirs.ID(), 10)) || !strings.Contains(page, strconv.FormatUint(ours.ID(), 10)) {
				t.Errorf("GET /ui/reservations = %d, want both reservations, one of another replica:\n%s", status, page)
			}
			if err := ours.Release(ctx); err != nil {
				t.Fatal(err)
			}
			check(a, theirs)
			check(b, theirs)
			if err := theirs.Release(ctx); err != nil {
				t.Fatal(err)
			}
			check(a)
			check(b)
		})
	}
}

// reservations reads GET /admin/v1/reservations with query.
func (e *env) reservations(query string) ReservationList {
	e.t.Helper()
	r := e.must(http.StatusOK, "GET", "/admin/v1/reservations"+query, rootToken, nil)
	var list ReservationList
	if err := json.Unmarshal([]byte(r.raw), &list); err != nil {
		e.t.Fatal(err)
	}
	return list
}
