package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var (
	keyRPM = Rule{Rule: sluice.Rule{Name: "key_requests_per_minute", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricRequests,
		Window: time.Minute}}
	keyMonthlyCost = Rule{Rule: sluice.Rule{Name: "key_cost_per_month", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricCost,
		Period: sluice.PeriodMonth}}
)

func TestCatalog_CreateKeyWithLimits(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		limits := []KeyLimit{{Rule: keyRPM, Store: true, Limit: 60}, {Rule: keyMonthlyCost, Store: true, Limit: 25_000_000}}
		secret, k, overrides, err := c.CreateKeyWithLimits(ctx, Key{Workspace: "w", User: "u"}, limits, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if len(overrides) != 2 || overrides[0].Value != k.ID || *overrides[1].Limit != 25_000_000 {
			t.Fatalf("overrides = %+v", overrides)
		}
		// The rules are stored with limit 0: they bind no other key.
		rules, err := c.ListRules(ctx)
		if err != nil || len(rules) != 2 {
			t.Fatalf("ListRules = %+v, %v", rules, err)
		}
		for _, r := range rules {
			if r.Limit != 0 || r.Subject != "key" || r.Disabled {
				t.Fatalf("stored rule %+v, want an enabled per-key rule with limit 0", r)
			}
		}
		stored, err := c.ListOverrides(ctx)
		if err != nil || len(stored) != 2 {
			t.Fatalf("ListOverrides = %+v, %v", stored, err)
		}
		// A second key reuses the stored rules.
		_, k2, _, err := c.CreateKeyWithLimits(ctx, Key{Workspace: "w", User: "v"}, limits[:1], "admin")
		if err != nil {
			t.Fatal(err)
		}
		if rules, _ := c.ListRules(ctx); len(rules) != 2 {
			t.Fatalf("after a second key: %d rules, want 2", len(rules))
		}
		var actions []string
		entries, err := c.ListAudit(ctx, AuditQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Actor != "admin" {
				t.Fatalf("audit entry %+v: actor %q", e, e.Actor)
			}
			actions = append(actions, e.Action)
		}
		slices.Sort(actions)
		want := []string{ActionKeyCreate, ActionKeyCreate, ActionOverrideSet, ActionOverrideSet, ActionOverrideSet, ActionRuleCreate, ActionRuleCreate}
		if !slices.Equal(actions, want) {
			t.Fatalf("audit actions = %v, want %v", actions, want)
		}
		if k2.ID == k.ID {
			t.Fatal("two keys share an ID")
		}
	})
}

// A limit that cannot be written leaves nothing behind: no key, no rule,
// no override, no audit entry.
func TestCatalog_CreateKeyWithLimitsIsOneTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		// A stored rule of the name with another shape refuses the limit.
		other := keyRPM
		other.Metric = sluice.MetricTokens
		other.Limit = 1000
		if _, err := c.CreateRule(ctx, other, "admin"); err != nil {
			t.Fatal(err)
		}
		before, _ := c.ListAudit(ctx, AuditQuery{Limit: 100})
		_, _, _, err := c.CreateKeyWithLimits(ctx, Key{Workspace: "w", User: "u"},
			[]KeyLimit{{Rule: keyMonthlyCost, Store: true, Limit: 5}, {Rule: keyRPM, Store: true, Limit: 60}}, "admin")
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid for a stored rule of another shape", err)
		}
		keys, _ := c.ListKeys(ctx, "")
		rules, _ := c.ListRules(ctx)
		overrides, _ := c.ListOverrides(ctx)
		after, _ := c.ListAudit(ctx, AuditQuery{Limit: 100})
		if len(keys) != 0 || len(rules) != 1 || len(overrides) != 0 || len(after) != len(before) {
			t.Fatalf("after a refused creation: %d keys, %d rules, %d overrides, %d audit entries (was %d)",
				len(keys), len(rules), len(overrides), len(after), len(before))
		}
		// A failing insert rolls back too.
		be.refuseInserts(t, c, "overrides")
		_, _, _, err = c.CreateKeyWithLimits(ctx, Key{Workspace: "w", User: "u"}, []KeyLimit{{Rule: keyMonthlyCost, Store: true, Limit: 5}}, "admin")
		be.allowInserts(t, c, "overrides")
		if err == nil {
			t.Fatal("creation with a failing override insert succeeded")
		}
		if keys, _ := c.ListKeys(ctx, ""); len(keys) != 0 {
			t.Fatalf("a key survived a failed transaction: %+v", keys)
		}
		if rules, _ := c.ListRules(ctx); len(rules) != 1 {
			t.Fatalf("a rule survived a failed transaction: %+v", rules)
		}
	})
}

func TestCatalog_CreateKeyWithLimitsValidates(t *testing.T) {
	c, _ := (&backend{name: "sqlite", d: sqliteDialect, path: t.TempDir() + "/c.db"}).openTest(t)
	ctx := context.Background()
	perUser := keyRPM
	perUser.Subject = "user"
	for _, l := range []KeyLimit{
		{Rule: Rule{}, Limit: 1},
		{Rule: perUser, Store: true, Limit: 1},
		{Rule: keyRPM, Store: true, Limit: -1},
	} {
		if _, _, _, err := c.CreateKeyWithLimits(ctx, Key{Workspace: "w", User: "u"}, []KeyLimit{l}, "admin"); !errors.Is(err, ErrInvalid) {
			t.Errorf("limit %+v: err = %v, want ErrInvalid", l, err)
		}
	}
	if keys, _ := c.ListKeys(ctx, ""); len(keys) != 0 {
		t.Fatalf("refused creations made keys: %+v", keys)
	}
}

func TestCatalog_UpdateKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		secret, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", Name: "old", Tier: "new", AllowedModels: []string{"a"}}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Authenticate(ctx, secret); err != nil { // cached now
			t.Fatal(err)
		}
		name, tier, models, expires := "laptop", "standard", []string{"a", "b"}, clock.Now().Add(time.Hour)
		got, err := c.UpdateKey(ctx, k.ID, KeyUpdate{Name: &name, Tier: &tier, AllowedModels: &models, ExpiresAt: &expires}, "ops")
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != name || got.Tier != tier || !slices.Equal(got.AllowedModels, models) || !got.ExpiresAt.Equal(expires) {
			t.Fatalf("UpdateKey = %+v", got)
		}
		// The same secret works, and the cache shows the change at once.
		auth, err := c.Authenticate(ctx, secret)
		if err != nil || auth.Tier != tier || !slices.Equal(auth.AllowedModels, models) {
			t.Fatalf("Authenticate after update = %+v, %v", auth, err)
		}
		// Only the fields given change; an empty model list allows any; a
		// zero expiry means never.
		none, never := []string{}, time.Time{}
		got, err = c.UpdateKey(ctx, k.ID, KeyUpdate{AllowedModels: &none, ExpiresAt: &never}, "ops")
		if err != nil || got.Name != name || got.Tier != tier || got.AllowedModels != nil || !got.ExpiresAt.IsZero() {
			t.Fatalf("second UpdateKey = %+v, %v", got, err)
		}
		entries, err := c.ListAudit(ctx, AuditQuery{Action: ActionKeyUpdate})
		if err != nil || len(entries) != 2 || entries[0].Actor != "ops" {
			t.Fatalf("update audit = %+v, %v", entries, err)
		}
		past := clock.Now().Add(-time.Second)
		if _, err := c.UpdateKey(ctx, k.ID, KeyUpdate{ExpiresAt: &past}, "ops"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("past expiry: err = %v, want ErrInvalid", err)
		}
		if _, err := c.UpdateKey(ctx, "nosuchkey234", KeyUpdate{Name: &name}, "ops"); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("unknown key: err = %v, want ErrUnknownKey", err)
		}
		if err := c.RevokeKey(ctx, k.ID, "ops"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.UpdateKey(ctx, k.ID, KeyUpdate{Name: &name}, "ops"); !errors.Is(err, ErrRevokedKey) {
			t.Fatalf("revoked key: err = %v, want ErrRevokedKey", err)
		}
	})
}

func TestSameShape(t *testing.T) {
	noMetric := keyRPM
	noMetric.Metric = ""
	noMetric.Limit = 120
	otherWindow := keyRPM
	otherWindow.Window = time.Hour
	inFlight := sluice.Rule{Name: "c", Kind: sluice.KindConcurrency, Subject: "key"}
	inFlightNamed := inFlight
	inFlightNamed.Metric = sluice.MetricConcurrency
	for _, tc := range []struct {
		a, b sluice.Rule
		same bool
	}{
		{keyRPM.Rule, noMetric.Rule, true}, // no metric counts requests; the limit may differ
		{keyRPM.Rule, otherWindow.Rule, false},
		{keyRPM.Rule, keyMonthlyCost.Rule, false},
		{inFlight, inFlightNamed, true},
	} {
		if got := SameShape(tc.a, tc.b); got != tc.same {
			t.Errorf("SameShape(%+v, %+v) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

// TestCatalog_CreateKeysWithLimitsAtOnce checks that keys made at the same
// time, all asking for the same missing per-key rule, are all made, and the
// rule stored once.
func TestCatalog_CreateKeysWithLimitsAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		const n = 8
		errs := make(chan error, n)
		for i := range n {
			go func() {
				_, _, _, err := c.CreateKeyWithLimits(ctx, Key{Workspace: "w", User: fmt.Sprint("u", i)},
					[]KeyLimit{{Rule: keyRPM, Store: true, Limit: 10}}, "admin")
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		rules, _ := c.ListRules(ctx)
		overrides, _ := c.ListOverrides(ctx)
		if len(rules) != 1 || len(overrides) != n {
			t.Fatalf("%d rules and %d overrides, want 1 and %d", len(rules), len(overrides), n)
		}
	})
}
