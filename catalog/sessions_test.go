package catalog

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func testSession(clock *fakeClock) Session {
	return Session{KeyID: "k1", Org: "o", Workspace: "acme", User: "ada", Model: "m",
		ExpiresAt: clock.Now().Add(time.Hour), MaxTurns: 3, MaxTokens: 1000, MaxCost: 500}
}

func TestCatalog_SessionCeilings(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		s, created, err := c.OpenSession(ctx, testSession(clock), 0)
		if err != nil || !created {
			t.Fatal(created, err)
		}
		if len(s.ID) != len("sess_")+26 || !s.CreatedAt.Equal(clock.Now()) {
			t.Fatalf("minted %+v", s)
		}
		// Another key does not see it.
		if _, err := c.GetSession(ctx, s.ID, "k2"); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("another key's GetSession: %v", err)
		}
		if _, err := c.ChargeSession(ctx, s.ID, "k2", 1, 1, 0); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("another key's ChargeSession: %v", err)
		}
		// Tokens: a reservation that would pass the ceiling is refused whole.
		if _, err := c.ChargeSession(ctx, s.ID, "k1", 600, 100, 0); err != nil {
			t.Fatal(err)
		}
		var ce *CeilingError
		if _, err := c.ChargeSession(ctx, s.ID, "k1", 500, 100, 0); !errors.As(err, &ce) || ce.Ceiling != "tokens" || ce.Used != 600 || ce.Limit != 1000 || !ce.First {
			t.Fatalf("second charge: %v", err)
		}
		// Settled at less than reserved: the refund makes room.
		if err := c.SettleSession(ctx, s.ID, 0, -400, -50); err != nil {
			t.Fatal(err)
		}
		got, err := c.ChargeSession(ctx, s.ID, "k1", 500, 100, 0)
		if err != nil || got.Turns != 2 || got.Tokens != 700 || got.Cost != 150 || got.Ceiling != "tokens" {
			t.Fatalf("after the refund: %+v, %v", got, err)
		}
		// Cost, then turns.
		if _, err := c.ChargeSession(ctx, s.ID, "k1", 1, 400, 0); !errors.As(err, &ce) || ce.Ceiling != "cost" || ce.First {
			t.Fatalf("cost: %v", err)
		}
		if _, err := c.ChargeSession(ctx, s.ID, "k1", 1, 1, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ChargeSession(ctx, s.ID, "k1", 1, 1, 0); !errors.As(err, &ce) || ce.Ceiling != "turns" || ce.Limit != 3 {
			t.Fatalf("fourth turn: %v", err)
		}
		// An overrun is charged whole.
		if err := c.SettleSession(ctx, s.ID, 0, 5000, 0); err != nil {
			t.Fatal(err)
		}
		if got, _ := c.GetSession(ctx, s.ID, "k1"); got.Tokens != 5701 || got.Ceiling != "tokens" {
			t.Fatalf("after the overrun: %+v", got)
		}

		// Context: one call's input over the ceiling is refused whatever is
		// left.
		sc := testSession(clock)
		sc.MaxContext = 300
		sc, _, err = c.OpenSession(ctx, sc, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ChargeSession(ctx, sc.ID, "k1", 400, 1, 301); !errors.As(err, &ce) || ce.Ceiling != "context" || ce.Want != 301 || ce.Limit != 300 {
			t.Fatalf("context over the ceiling: %v", err)
		}
		if got, err := c.ChargeSession(ctx, sc.ID, "k1", 400, 1, 300); err != nil || got.Turns != 1 || got.MaxContext != 300 {
			t.Fatalf("context at the ceiling: %+v %v", got, err)
		}

		// Wall clock, and close.
		s2, _, err := c.OpenSession(ctx, testSession(clock), 0)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		if _, err := c.ChargeSession(ctx, s2.ID, "k1", 1, 1, 0); !errors.As(err, &ce) || ce.Ceiling != "wall_clock" || ce.Limit != 3600 {
			t.Fatalf("expired: %v", err)
		}
		s3, _, err := c.OpenSession(ctx, testSession(clock), 0)
		if err != nil {
			t.Fatal(err)
		}
		closed, now, err := c.CloseSession(ctx, s3.ID, "k1")
		if err != nil || !now || closed.ClosedAt.IsZero() || closed.Open(clock.Now()) {
			t.Fatalf("closed %+v, %v, %v", closed, now, err)
		}
		if again, now, err := c.CloseSession(ctx, s3.ID, "k1"); err != nil || now || !again.ClosedAt.Equal(closed.ClosedAt) {
			t.Fatalf("closed twice: %+v, %v, %v", again, now, err)
		}
		if _, err := c.ChargeSession(ctx, s3.ID, "k1", 1, 1, 0); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("closed session charged: %v", err)
		}
	})
}

func TestCatalog_SessionMintIsIdempotentAndCapped(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		s := testSession(clock)
		s.IdempotencyKey = "mint-1"
		first, created, err := c.OpenSession(ctx, s, 2)
		if err != nil || !created {
			t.Fatal(created, err)
		}
		again, created, err := c.OpenSession(ctx, s, 2)
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("retried mint: %+v created=%v %v, want %s again", again, created, err, first.ID)
		}
		// The same idempotency key under another key is another session.
		other := s
		other.KeyID, other.User = "k2", "bob"
		if o, created, err := c.OpenSession(ctx, other, 2); err != nil || !created || o.ID == first.ID {
			t.Fatalf("other key: %+v %v %v", o, created, err)
		}
		// The cap counts open sessions of the user, from any replica at once.
		s.IdempotencyKey = ""
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ok, refused int
		for range 8 {
			wg.Go(func() {
				_, _, err := c.OpenSession(ctx, s, 2)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, ErrTooManySessions):
					refused++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if ok != 1 || refused != 7 {
			t.Fatalf("8 concurrent mints with 1 of 2 places left: %d minted, %d refused", ok, refused)
		}
		// A closed or expired session frees its place.
		if _, _, err := c.CloseSession(ctx, first.ID, "k1"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.OpenSession(ctx, s, 2); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		if _, _, err := c.OpenSession(ctx, testSession(clock), 2); err != nil {
			t.Fatalf("after the others expired: %v", err)
		}
	})
}

func TestCatalog_SessionChargesHoldUnderConcurrency(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		s := testSession(clock)
		s.MaxTurns, s.MaxTokens, s.MaxCost = 0, 1000, 0
		s, _, err := c.OpenSession(ctx, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for range 32 {
			wg.Go(func() {
				_, err := c.ChargeSession(ctx, s.ID, "k1", 100, 0, 0)
				var ce *CeilingError
				switch {
				case err == nil:
					mu.Lock()
					admitted++
					mu.Unlock()
				case errors.As(err, &ce):
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got, _ := c.GetSession(ctx, s.ID, "k1")
		if admitted != 10 || got.Tokens != 1000 || got.Turns != 10 {
			t.Fatalf("32 concurrent charges of 100 under a 1000 ceiling: %d admitted, session %+v", admitted, got)
		}
	})
}

func TestCatalog_ListAndEndSessions(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		var ids []string
		for i, ws := range []string{"acme", "acme", "other"} {
			s := testSession(clock)
			s.Workspace = ws
			s, _, err := c.OpenSession(ctx, s, 0)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, s.ID)
			clock.Advance(time.Duration(i+1) * time.Second)
		}
		all, err := c.ListSessions(ctx, "", false, 0)
		if err != nil || len(all) != 3 || all[0].ID != ids[2] || all[2].ID != ids[0] {
			t.Fatalf("all sessions, newest first: %+v %v", all, err)
		}
		acme, _ := c.ListSessions(ctx, "acme", false, 0)
		if len(acme) != 2 {
			t.Fatalf("acme: %+v", acme)
		}
		ended, closed, err := c.EndSession(ctx, ids[1], "admin")
		if err != nil || ended.ClosedAt.IsZero() || !closed {
			t.Fatalf("end: %+v %v %v", ended, closed, err)
		}
		if _, closed, err := c.EndSession(ctx, ids[1], "admin"); err != nil || closed {
			t.Fatalf("end again: closed %v, %v; want nothing done", closed, err)
		}
		if _, _, err := c.EndSession(ctx, "sess_nope", "admin"); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("unknown: %v", err)
		}
		open, _ := c.ListSessions(ctx, "acme", true, 0)
		if len(open) != 1 || open[0].ID != ids[0] {
			t.Fatalf("open acme sessions: %+v", open)
		}
		// The owner's calls are refused once an operator ended it.
		if _, err := c.ChargeSession(ctx, ids[1], "k1", 1, 1, 0); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("charge after end: %v", err)
		}
		entries, err := c.ListAudit(ctx, AuditQuery{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range entries {
			if e.Action == ActionSessionClose && e.Target == "session/"+ids[1] && e.Actor == "admin" && e.Workspace == "acme" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d audit entries for the end, want 1: %+v", n, entries)
		}
	})
}

// BenchmarkSessionCall measures what a call in a session adds on the
// catalog (the model check, the charge, the settlement: three statements),
// against the peer measured beside it, one plain single-row UPDATE on the
// same database: the cheapest write a call could make. PostgreSQL is gated
// by testenv.PostgresURL.
func BenchmarkSessionCall(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			be := &backend{name: "sqlite", d: sqliteDialect, path: filepath.Join(b.TempDir(), "catalog.db")}
			if name == "postgres" {
				be = &backend{name: "postgres", d: postgresDialect, url: testSchemaURL(b)}
			}
			c, clock := be.openTest(b)
			ctx := context.Background()
			s := testSession(clock)
			s.MaxTurns, s.MaxTokens, s.MaxCost = 0, 0, 0
			s, _, err := c.OpenSession(ctx, s, 0)
			if err != nil {
				b.Fatal(err)
			}
			b.Run("session", func(b *testing.B) {
				for b.Loop() {
					if _, err := c.GetSession(ctx, s.ID, "k1"); err != nil {
						b.Fatal(err)
					}
					if _, err := c.ChargeSession(ctx, s.ID, "k1", 300, 20, 100); err != nil {
						b.Fatal(err)
					}
					if err := c.SettleSession(ctx, s.ID, 0, -50, -3); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("plain-update", func(b *testing.B) {
				q := c.d.q(`UPDATE sessions SET turns = turns + 1 WHERE id = ?`)
				for b.Loop() {
					if _, err := c.db.ExecContext(ctx, q, s.ID); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// A session ends once: EndExpiredSessions marks those past their wall
// clock that nothing ended (not closed, no ceiling), each once, with what
// they used; a closed one is never marked by a ceiling afterwards.
func TestCatalog_EndExpiredSessions(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		open := func() Session {
			t.Helper()
			s, _, err := c.OpenSession(ctx, testSession(clock), 0)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		idle, used, closed, capped := open(), open(), open(), open()
		if _, err := c.ChargeSession(ctx, used.ID, "k1", 100, 40, 10); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.CloseSession(ctx, closed.ID, "k1"); err != nil {
			t.Fatal(err)
		}
		var ce *CeilingError
		if _, err := c.ChargeSession(ctx, capped.ID, "k1", 5000, 0, 0); !errors.As(err, &ce) || !ce.First {
			t.Fatalf("over the token ceiling: %v", err)
		}
		if ended, err := c.EndExpiredSessions(ctx); err != nil || len(ended) != 0 {
			t.Fatalf("before the wall clock: %+v %v", ended, err)
		}
		clock.Advance(time.Hour)
		ended, err := c.EndExpiredSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Session{}
		for _, s := range ended {
			got[s.ID] = s
		}
		if len(got) != 2 || got[idle.ID].Ceiling != "wall_clock" || got[used.ID].Cost != 40 || got[used.ID].Turns != 1 {
			t.Fatalf("ended = %+v, want the idle and the used session, by the wall clock", ended)
		}
		if again, err := c.EndExpiredSessions(ctx); err != nil || len(again) != 0 {
			t.Fatalf("a second sweep = %+v %v, want none", again, err)
		}
		// A closed session is refused as closed, and no ceiling marks it.
		if _, err := c.ChargeSession(ctx, closed.ID, "k1", 1, 1, 0); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("charge of a closed session: %v", err)
		}
		if s, _ := c.GetSession(ctx, closed.ID, "k1"); s.Ceiling != "" {
			t.Fatalf("closed session's ceiling = %q", s.Ceiling)
		}
	})
}
