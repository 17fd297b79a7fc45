package catalog

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// storedDefinition is a rules.definition as this version writes it, every
// field set: what the rules table holds after an upgrade.
const storedDefinition = `{"name":"n","org":"acme","kind":"budget","subject":"workspace+user","metric":"cost","limit":10,"burst":3,"window":"1m30s","period":"month","time_zone":"Europe/Paris","soft_limit":8,"warn_at":[0.5,0.9],"reserve":"fixed","reserve_amount":2,"on_expiry":"release","on_store_error":"open","fit":"clamp","min_output_tokens":5,"match":{"models":["a"],"tiers":["t"],"routes":["/v1/x"]},"mode":"shadow","enabled":true,"created_at":"2023-11-14T22:13:20.000000005Z","updated_at":"2023-11-14T22:15:00Z"}`

// storedEngineRule is what storedDefinition means to the engine.
var storedEngineRule = sluice.Rule{
	Name: "n", Org: "acme", Kind: sluice.KindBudget, Subject: "workspace+user", Metric: sluice.MetricCost,
	Limit: 10, Burst: 3, Window: 90 * time.Second, Period: sluice.PeriodMonth, TimeZone: "Europe/Paris",
	SoftLimit: 8, WarnAt: []float64{0.5, 0.9}, Reserve: sluice.ReserveFixed, ReserveAmount: 2,
	OnExpiry: sluice.ExpiryRelease, OnStoreError: sluice.StoreErrorOpen, Fit: "clamp", MinOutputTokens: 5,
	Match: sluice.Match{Models: []string{"a"}, Tiers: []string{"t"}, Routes: []string{"/v1/x"}}, Mode: sluice.ModeShadow,
}

// TestRule_StoredDefinitionRoundTrips: a definition stored by this version
// loads into Rule unchanged and is written back byte for byte.
func TestRule_StoredDefinitionRoundTrips(t *testing.T) {
	var r Rule
	if err := json.Unmarshal([]byte(storedDefinition), &r); err != nil {
		t.Fatal(err)
	}
	if got := r.Sluice(); !reflect.DeepEqual(got, storedEngineRule) {
		t.Errorf("engine rule =\n%#v\nwant\n%#v", got, storedEngineRule)
	}
	if !r.Enabled || !r.CreatedAt.Equal(time.Unix(1700000000, 5)) || !r.UpdatedAt.Equal(time.Unix(1700000100, 0)) {
		t.Errorf("enabled %v, created %v, updated %v", r.Enabled, r.CreatedAt, r.UpdatedAt)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != storedDefinition {
		t.Errorf("written back as\n%s\nwant\n%s", b, storedDefinition)
	}
	var minimal Rule
	const short = `{"name":"m","kind":"rate","subject":"key","limit":1,"window":"1m0s","enabled":false}`
	if err := json.Unmarshal([]byte(short), &minimal); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(minimal); string(b) != short {
		t.Errorf("minimal rule written back as %s, want %s", b, short)
	}
	if !minimal.Sluice().Disabled {
		t.Error("a rule stored with enabled false is not disabled")
	}
}

// TestCatalog_LoadsAStoredDefinition: the rules table's definition column,
// as this version writes it, loads through GetRule.
func TestCatalog_LoadsAStoredDefinition(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		if _, err := c.db.ExecContext(ctx, c.d.q(`INSERT INTO rules (name, org, definition, enabled, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`),
			"n", "acme", storedDefinition, true, 1, 1); err != nil {
			t.Fatal(err)
		}
		r, err := c.GetRule(ctx, "acme", "n")
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Sluice(); !reflect.DeepEqual(got, storedEngineRule) {
			t.Errorf("engine rule =\n%#v\nwant\n%#v", got, storedEngineRule)
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
	got := r.Sluice()
	want := []sluice.Class{{Name: "interactive", Weight: 3, Floor: 6}, {Name: "batch"}}
	if !reflect.DeepEqual(got.Classes, want) || got.DefaultClass != "batch" {
		t.Errorf("engine rule classes %+v, default %q; want %+v, batch", got.Classes, got.DefaultClass, want)
	}
	if b, _ := json.Marshal(RuleOf(got)); string(b) != def {
		t.Errorf("written back as\n%s\nwant\n%s", b, def)
	}
}
