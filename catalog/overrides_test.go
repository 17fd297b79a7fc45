package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

func ptr(v int64) *int64 { return &v }

func TestCatalog_OverridesRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		expires := clock.Now().Add(24 * time.Hour)
		set := []Override{
			{Rule: "daily", Attribute: "workspace", Value: "acme", Limit: ptr(0)},             // disabled
			{Rule: "daily", Attribute: "workspace", Value: "beta", Limit: nil, Burst: ptr(5)}, // limit inherited
			{Rule: "rpm", Attribute: "user", Value: "ada", Limit: ptr(100), Burst: ptr(0), ExpiresAt: expires},
		}
		for _, o := range set {
			if err := c.SetOverride(ctx, o, "alice"); err != nil {
				t.Fatal(err)
			}
		}
		got, err := c.ListOverrides(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(set) {
			t.Fatalf("ListOverrides = %+v", got)
		}
		for i := range set {
			if !sameOverride(got[i], set[i]) {
				t.Errorf("override %d = %s, want %s", i, show(got[i]), show(set[i]))
			}
		}
		if got[0].Limit == nil || *got[0].Limit != 0 {
			t.Error("a 0 limit came back as NULL")
		}
		if got[1].Limit != nil || got[1].Burst == nil {
			t.Error("a NULL limit came back as a number")
		}

		// Replacing keeps one row per (rule, attribute, value) and audits before and after.
		if err := c.SetOverride(ctx, Override{Rule: "daily", Attribute: "workspace", Value: "acme", Limit: ptr(7)}, "bob"); err != nil {
			t.Fatal(err)
		}
		got, _ = c.ListOverrides(ctx)
		if len(got) != 3 || *got[0].Limit != 7 {
			t.Fatalf("after replace: %+v", got)
		}
		entries, err := c.ListAudit(ctx, AuditQuery{Target: "override/daily/workspace/acme"})
		if err != nil || len(entries) != 2 {
			t.Fatalf("audit = %+v, %v", entries, err)
		}
		var before, after Override
		json.Unmarshal(entries[0].Before.(json.RawMessage), &before)
		json.Unmarshal(entries[0].After.(json.RawMessage), &after)
		if entries[0].Actor != "bob" || *before.Limit != 0 || *after.Limit != 7 {
			t.Errorf("replace audit = %s: %s -> %s", entries[0].Actor, entries[0].Before, entries[0].After)
		}
		if entries[1].Before != nil {
			t.Errorf("first set has a before: %s", entries[1].Before)
		}

		if err := c.DeleteOverride(ctx, Override{Rule: "daily", Attribute: "workspace", Value: "acme"}, "carol"); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteOverride(ctx, Override{Rule: "daily", Attribute: "workspace", Value: "acme"}, "carol"); !errors.Is(err, ErrUnknownOverride) {
			t.Fatalf("second delete: err = %v, want ErrUnknownOverride", err)
		}
		got, _ = c.ListOverrides(ctx)
		if len(got) != 2 || got[0].Value != "beta" {
			t.Fatalf("after delete: %+v", got)
		}
		entries, _ = c.ListAudit(ctx, AuditQuery{Action: ActionOverrideDelete})
		if len(entries) != 1 || entries[0].After != nil || entries[0].Before == nil {
			t.Fatalf("delete audit = %+v", entries)
		}
	})
}

func TestCatalog_SetOverrideValidates(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for _, tc := range []struct {
			name  string
			o     Override
			actor string
		}{
			{"no rule", Override{Attribute: "user", Value: "u"}, "a"},
			{"no value", Override{Rule: "r", Attribute: "user"}, "a"},
			{"bad attribute", Override{Rule: "r", Attribute: "model", Value: "m"}, "a"},
			{"negative limit", Override{Rule: "r", Attribute: "user", Value: "u", Limit: ptr(-1)}, "a"},
			{"negative burst", Override{Rule: "r", Attribute: "user", Value: "u", Burst: ptr(-1)}, "a"},
			{"no actor", Override{Rule: "r", Attribute: "user", Value: "u"}, ""},
		} {
			if err := c.SetOverride(ctx, tc.o, tc.actor); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
			}
		}
	})
}

func TestOverride_Sluice(t *testing.T) {
	expires := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	o := Override{Rule: "r", Attribute: "team", Value: "ml", Limit: ptr(0), ExpiresAt: expires}
	s := o.Sluice()
	want := sluice.Override{Rule: "r", Attribute: "team", Value: "ml", ExpiresAt: expires}
	if s.Rule != want.Rule || s.Attribute != want.Attribute || s.Value != want.Value || !s.ExpiresAt.Equal(expires) ||
		s.Limit == nil || *s.Limit != 0 || s.Burst != nil {
		t.Fatalf("Sluice() = %+v", s)
	}
	*s.Limit = 9
	if *o.Limit != 0 {
		t.Fatal("Sluice() shares its Limit with the catalog's Override")
	}
	// The engine accepts what the catalog stores.
	_, err := sluice.New(sluice.Options{
		Store:     memstore.New(memstore.Options{}),
		Rules:     []sluice.Rule{{Name: "r", Kind: sluice.KindRate, Subject: "team", Metric: sluice.MetricRequests, Limit: 10, Window: time.Minute}},
		Overrides: []sluice.Override{s},
	})
	if err != nil {
		t.Fatalf("the engine refuses a stored override: %v", err)
	}
}

func sameOverride(a, b Override) bool {
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Rule == b.Rule && a.Attribute == b.Attribute && a.Value == b.Value &&
		eq(a.Limit, b.Limit) && eq(a.Burst, b.Burst) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func show(o Override) string {
	b, _ := json.Marshal(o)
	return string(b)
}
