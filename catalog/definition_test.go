package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ruletest"
)

// storedDefinition is a rules.definition as this version writes it, every
// field set: sluice.Rule's JSON form and the catalog's timestamps.
const storedDefinition = `{"name":"n","kind":"budget","subject":"workspace+user","metric":"cost","limit":10,"burst":3,"period":"month","time_zone":"Europe/Paris","soft_limit":8,"warn_at":[0.5,0.9],"reserve":"fixed","reserve_amount":2,"on_expiry":"release","on_store_error":"open","fit":"clamp","min_output_tokens":5,"match":{"models":["a"],"tiers":["t"],"routes":["/v1/x"]},"mode":"shadow","org":"acme","window":"1m30s","busy_retry_after":"5s","enabled":true,"created_at":"2023-11-14T22:13:20.000000005Z","updated_at":"2023-11-14T22:15:00Z"}`

// earlierDefinition is storedDefinition as the versions before sluice.Rule
// was the catalog's schema wrote it: the same names in another order.
const earlierDefinition = `{"name":"n","org":"acme","kind":"budget","subject":"workspace+user","metric":"cost","limit":10,"burst":3,"window":"1m30s","period":"month","time_zone":"Europe/Paris","soft_limit":8,"warn_at":[0.5,0.9],"reserve":"fixed","reserve_amount":2,"on_expiry":"release","on_store_error":"open","fit":"clamp","min_output_tokens":5,"match":{"models":["a"],"tiers":["t"],"routes":["/v1/x"]},"mode":"shadow","busy_retry_after":"5s","enabled":true,"created_at":"2023-11-14T22:13:20.000000005Z","updated_at":"2023-11-14T22:15:00Z"}`

// storedWant is what both definitions mean.
var storedWant = Rule{
	Rule: sluice.Rule{
		Name: "n", Org: "acme", Kind: sluice.KindBudget, Subject: "workspace+user", Metric: sluice.MetricCost,
		Limit: 10, Burst: 3, Window: 90 * time.Second, Period: sluice.PeriodMonth, TimeZone: "Europe/Paris",
		SoftLimit: 8, WarnAt: []float64{0.5, 0.9}, Reserve: sluice.ReserveFixed, ReserveAmount: 2,
		OnExpiry: sluice.ExpiryRelease, OnStoreError: sluice.StoreErrorOpen, Fit: "clamp", MinOutputTokens: 5,
		Match: sluice.Match{Models: []string{"a"}, Tiers: []string{"t"}, Routes: []string{"/v1/x"}}, Mode: sluice.ModeShadow,
		BusyRetryAfter: 5 * time.Second,
	},
	CreatedAt: time.Unix(1700000000, 5).UTC(),
	UpdatedAt: time.Unix(1700000100, 0).UTC(),
}

// TestRule_StoredDefinitionRoundTrips: a definition stored by this version,
// or by an earlier one, loads into Rule unchanged, and is written back as
// this version writes it, byte for byte.
func TestRule_StoredDefinitionRoundTrips(t *testing.T) {
	for _, def := range []string{storedDefinition, earlierDefinition} {
		var r Rule
		if err := json.Unmarshal([]byte(def), &r); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, storedWant) {
			t.Errorf("%s\nloads as\n%#v\nwant\n%#v", def, r, storedWant)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != storedDefinition {
			t.Errorf("written back as\n%s\nwant\n%s", b, storedDefinition)
		}
	}
	var minimal Rule
	const short = `{"name":"m","kind":"rate","subject":"key","limit":1,"window":"1m0s","enabled":false}`
	if err := json.Unmarshal([]byte(short), &minimal); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(minimal); string(b) != short {
		t.Errorf("minimal rule written back as %s, want %s", b, short)
	}
	if !minimal.Disabled {
		t.Error("a rule stored with enabled false is not disabled")
	}
}

// TestRule_EveryFieldSurvivesTheCatalog: a rule with every field of
// sluice.Rule set (a field added later included) is stored and loaded
// unchanged, by GetRule and by ListRules.
func TestRule_EveryFieldSurvivesTheCatalog(t *testing.T) {
	want := Rule{Rule: ruletest.Filled(t), CreatedAt: time.Unix(1700000000, 5).UTC(), UpdatedAt: time.Unix(1700000100, 0).UTC()}
	def, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		if _, err := c.db.ExecContext(ctx, c.d.q(`INSERT INTO rules (name, org, definition, enabled, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`),
			want.Name, want.Org, string(def), false, 1, 1); err != nil {
			t.Fatal(err)
		}
		got, err := c.GetRule(ctx, want.Org, want.Name)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("GetRule = %#v, %v\nwant %#v\nstored %s", got, err, want, def)
		}
		list, err := c.ListRules(ctx, want.Org)
		if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], want) {
			t.Errorf("ListRules = %#v, %v\nwant [%#v]", list, err, want)
		}
	})
}

// TestCatalog_LoadsAStoredDefinition: the rules table's definition column,
// as this version and earlier ones write it, loads through GetRule.
func TestCatalog_LoadsAStoredDefinition(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for i, def := range []string{storedDefinition, earlierDefinition} {
			name := fmt.Sprintf("n%d", i)
			if _, err := c.db.ExecContext(ctx, c.d.q(`INSERT INTO rules (name, org, definition, enabled, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`),
				name, "acme", def, true, 1, 1); err != nil {
				t.Fatal(err)
			}
			r, err := c.GetRule(ctx, "acme", name)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, storedWant) {
				t.Errorf("%s loads as\n%#v\nwant\n%#v", def, r, storedWant)
			}
		}
	})
}

// TestRule_ClassesRoundTrip: a rule's priority classes are kept in its
// definition, read into the engine's rule and written back unchanged.
func TestRule_ClassesRoundTrip(t *testing.T) {
	const def = `{"name":"model-calls","kind":"concurrency","subject":"global","limit":12,"classes":[{"name":"interactive","weight":3,"floor":6},{"name":"batch"}],"default_class":"batch","enabled":true}`
	var r Rule
	if err := json.Unmarshal([]byte(def), &r); err != nil {
		t.Fatal(err)
	}
	got := r.Rule
	want := []sluice.Class{{Name: "interactive", Weight: 3, Floor: 6}, {Name: "batch"}}
	if !reflect.DeepEqual(got.Classes, want) || got.DefaultClass != "batch" {
		t.Errorf("engine rule classes %+v, default %q; want %+v, batch", got.Classes, got.DefaultClass, want)
	}
	b, err := json.Marshal(Rule{Rule: got})
	if err != nil {
		t.Fatal(err)
	}
	var back Rule
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Errorf("written back as\n%s\nread as %+v (%v), want %+v", b, back, err, r)
	}
}
