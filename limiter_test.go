package sluice_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestLimiter_OnOverrunReportsEachRule(t *testing.T) {
	var got []sluice.Overrun
	l, _ := newLimiter(t, sluice.Options{
		Rules:     []sluice.Rule{tpm(10_000), daily(sluice.MetricOutputTokens, 10_000), rpm(10)},
		OnOverrun: func(o sluice.Overrun) { got = append(got, o) },
	})
	settle(t, admit(t, l, tokens("k", 100, 100)), sluice.Usage{InputTokens: 100, OutputTokens: 50})
	if len(got) != 0 {
		t.Fatalf("a refund reported as overrun: %+v", got)
	}
	settle(t, admit(t, l, tokens("k", 100, 100)), sluice.Usage{InputTokens: 100, OutputTokens: 400})
	want := []sluice.Overrun{
		{Rule: "tpm", Subject: "k", Reserved: 200, Actual: 500},
		{Rule: "daily", Subject: "o\x1ews", Reserved: 100, Actual: 400},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("overruns %+v, want %+v", got, want)
	}
	if st := l.Stats(); st.Overruns != 2 || st.Admitted != 2 {
		t.Fatalf("stats %+v", st)
	}
	// No usage reported charges the reservation: no overrun.
	settle(t, admit(t, l, tokens("k", 100, 100)), sluice.Usage{})
	if len(got) != 2 {
		t.Fatalf("unreported usage reported an overrun: %+v", got[2:])
	}
}

func TestLimiter_ServerSubjectIsPerServerID(t *testing.T) {
	store := memstore.New(memstore.Options{})
	clock := storetest.NewClock(start)
	perServer := sluice.Rule{Name: "in_flight", Kind: sluice.KindConcurrency, Subject: "server", Limit: 1}
	a, _ := newLimiter(t, sluice.Options{Store: store, Clock: clock, ServerID: "a", Rules: []sluice.Rule{perServer}})
	a2, _ := newLimiter(t, sluice.Options{Store: store, Clock: clock, ServerID: "a", Rules: []sluice.Rule{perServer}})
	b, _ := newLimiter(t, sluice.Options{Store: store, Clock: clock, ServerID: "b", Rules: []sluice.Rule{perServer}})
	admit(t, a, byKey("k1"))
	refuse(t, a2, byKey("k2"), sluice.ErrBusy) // same server name, same counter
	admit(t, b, byKey("k3"))
}

func TestLimiter_MatchTiersAndRoutes(t *testing.T) {
	r := rpm(1)
	r.Match = sluice.Match{Tiers: []string{"free"}, Routes: []string{"chat", "responses"}}
	l, _ := withRules(t, r)
	req := func(tier, route string) sluice.Request {
		q := byKey(tier + "/" + route)
		q.Identity.Tier, q.Identity.Route = tier, route
		return q
	}
	for _, tt := range []struct {
		tier, route string
		limited     bool
	}{
		{"free", "chat", true},
		{"free", "responses", true},
		{"free", "embeddings", false},
		{"pro", "chat", false},
		{"", "", false},
	} {
		admit(t, l, req(tt.tier, tt.route))
		_, err := l.Admit(context.Background(), req(tt.tier, tt.route))
		if limited := errors.Is(err, sluice.ErrRateLimited); limited != tt.limited {
			t.Errorf("tier %q route %q: second request %v, want limited %v", tt.tier, tt.route, err, tt.limited)
		}
	}
}

func TestLimiter_SweepSettlesExpiredReservation(t *testing.T) {
	budget := daily(sluice.MetricTokens, 1000)
	l, clock := newLimiter(t, sluice.Options{Rules: []sluice.Rule{inFlight(1), budget}, DefaultTimeout: time.Second, ExpirySlack: time.Second})
	admit(t, l, tokens("k", 10, 0))
	// The deadline is the timeout plus the slack: two seconds.
	clock.Advance(2*time.Second - time.Nanosecond)
	if res, err := l.Sweep(context.Background()); err != nil || res.Reservations != 0 {
		t.Fatalf("sweep before the deadline: %+v %v", res, err)
	}
	refuse(t, l, tokens("k", 10, 0), sluice.ErrBusy)
	clock.Advance(time.Nanosecond)
	res, err := l.Sweep(context.Background())
	if err != nil || res.Reservations != 1 || res.Charged != 1 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if used := effective(t, l, ident("k"), "daily").Used; used != 10 {
		t.Fatalf("swept reservation charged %d, want the 10 reserved", used)
	}
	admit(t, l, tokens("k", 10, 0))
}

func TestLimiter_ResultNamesLeastRoomAndWarnings(t *testing.T) {
	budget := daily(sluice.MetricTokens, 1000)
	budget.WarnAt = []float64{0.25, 0.5}
	budget.SoftLimit = 600
	shadow := rpm(1)
	shadow.Name, shadow.Mode = "shadow_rpm", sluice.ModeShadow
	l, _ := withRules(t, tpm(10_000), budget, shadow)

	res := admit(t, l, tokens("k", 100, 100)).Result()
	// 800 of 1000 is less room than 9800 of 10000.
	if res.Rule != "daily" || res.Limit != 1000 || res.Remaining != 800 || len(res.Warnings) != 0 || len(res.Shadowed) != 0 {
		t.Fatalf("first result %+v", res)
	}
	res = admit(t, l, tokens("k", 200, 400)).Result()
	want := []sluice.Warning{{Rule: "daily", Subject: "o\x1ews", Threshold: 0.5, Soft: true, Used: 800, Limit: 1000,
		ResetAt: time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)}}
	if res.Rule != "daily" || res.Remaining != 200 || !res.ResetAt.Equal(time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("second result %+v, want the budget with 200 left", res)
	}
	if !reflect.DeepEqual(res.Warnings, want) {
		t.Fatalf("warnings %+v, want %+v", res.Warnings, want)
	}
	if !reflect.DeepEqual(res.Shadowed, []string{"shadow_rpm"}) {
		t.Fatalf("shadowed %v, want the shadow rpm over its limit", res.Shadowed)
	}
}

// Each charge is made on its own rule's subject, whatever rules come
// before it: tag rules (one charge per tag) and rules on the same or other
// attributes, in any order. Rules are told apart by their limits.
func TestLimiter_ChargesNameTheirRulesSubjects(t *testing.T) {
	perTag := sluice.Rule{Name: "per_tag", Kind: sluice.KindRate, Subject: "tag", Limit: 101, Window: time.Minute}
	perOrg := sluice.Rule{Name: "per_org", Kind: sluice.KindRate, Subject: "org", Limit: 102, Window: time.Minute}
	perUser := sluice.Rule{Name: "per_user", Kind: sluice.KindRate, Subject: "workspace+user", Limit: 103, Window: time.Minute}
	want := map[int64][]string{
		// A tag, a workspace and a user are qualified by their org.
		101: {"o\x1ea", "o\x1eb"}, 102: {"o"}, 103: {"o\x1ews\x1fo\x1eu"},
		104: {"k"}, 105: {"k"}, 106: {"k"},
	}
	orders := [][]sluice.Rule{
		{perTag, rpm(104), perOrg, tpm(105), inFlight(106), perUser},
		{rpm(104), perTag, tpm(105), perOrg, perUser, inFlight(106)},
		{perOrg, perUser, perTag, inFlight(106), tpm(105), rpm(104)},
	}
	for n, rules := range orders {
		l, _ := withRules(t, rules...)
		req := byKey("k")
		req.Identity.Tags = []string{"a", "b", "a"}
		r := admit(t, l, req)
		got := map[int64][]string{}
		for _, c := range r.Charges() {
			got[c.Limit] = append(got[c.Limit], c.Key.Subject)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("rule order %d: charged %v, want %v", n, got, want)
		}
		settle(t, r, sluice.Usage{})
	}
}

// TestLimiter_RetryAfterBuffer: the buffer is added to rate and busy hints,
// never to a budget (which has none).
func TestLimiter_RetryAfterBuffer(t *testing.T) {
	l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{rpm(1), inFlight(1)}, RetryAfterBuffer: 250 * time.Millisecond})
	admit(t, l, byKey("k"))
	_, err := l.Admit(context.Background(), byKey("k"))
	var rl *sluice.RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter != time.Minute+250*time.Millisecond {
		t.Fatalf("Admit: %v, want a rate limit with a hint of 1m0.25s", err)
	}
	l, _ = newLimiter(t, sluice.Options{Rules: []sluice.Rule{inFlight(1)}, RetryAfterBuffer: 250 * time.Millisecond})
	admit(t, l, byKey("k"))
	_, err = l.Admit(context.Background(), byKey("k"))
	var bz *sluice.BusyError
	if !errors.As(err, &bz) || bz.RetryAfter != time.Second+250*time.Millisecond {
		t.Fatalf("Admit: %v, want busy with a hint of 1.25s", err)
	}
	l, _ = newLimiter(t, sluice.Options{Rules: []sluice.Rule{daily(sluice.MetricRequests, 1)}, RetryAfterBuffer: time.Second})
	admit(t, l, byKey("k"))
	_, err = l.Admit(context.Background(), byKey("k"))
	var bu *sluice.BudgetError
	if !errors.As(err, &bu) || bu.RetryAfter != 0 {
		t.Fatalf("Admit: %v, want a budget refusal without a hint", err)
	}
}
