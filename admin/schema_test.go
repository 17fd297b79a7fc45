package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/internal/ruletest"
)

// TestPolicyRule_JSON: a rule in force is reported with the names and the
// duration strings the API has always used, and with its source.
func TestPolicyRule_JSON(t *testing.T) {
	for _, tt := range []struct {
		rule sluice.Rule
		want string
	}{
		{sluice.Rule{Name: "n", Org: "acme", Kind: sluice.KindRate, Subject: "workspace+user", Metric: sluice.MetricTokens, Limit: 10, Burst: 3,
			Window: 90 * time.Second, WarnAt: []float64{0.5}, Match: sluice.Match{Models: []string{"a"}}, Mode: sluice.ModeShadow, Disabled: true, Source: "config"},
			`{"name":"n","kind":"rate","subject":"workspace+user","metric":"tokens","limit":10,"burst":3,"warn_at":[0.5],"match":{"models":["a"]},"mode":"shadow","org":"acme","window":"1m30s","enabled":false,"source":"config"}`},
		{sluice.Rule{Name: "b", Kind: sluice.KindBudget, Subject: "org", Limit: 5, Period: sluice.PeriodDay, Source: "default"},
			`{"name":"b","kind":"budget","subject":"org","limit":5,"period":"day","enabled":true,"source":"default"}`},
		{sluice.Rule{Name: "c", Kind: sluice.KindBudget, Subject: "org", Metric: sluice.MetricCost, Limit: 5_000_000, SoftLimit: 250_000, Period: sluice.PeriodDay, Source: "rule"},
			`{"name":"c","kind":"budget","subject":"org","metric":"cost","limit":"$5","period":"day","soft_limit":"$0.25","enabled":true,"source":"rule"}`},
	} {
		b, err := json.Marshal(policyRule{tt.rule})
		if err != nil || string(b) != tt.want {
			t.Errorf("policy rule %s = %s, %v; want %s", tt.rule.Name, b, err, tt.want)
		}
	}
}

// TestRuleRequest_Decode: the body of POST /admin/v1/rules, every field
// set, and the fields it refuses or requires.
func TestRuleRequest_Decode(t *testing.T) {
	decodeRule := func(body string) (sluice.Rule, bool, error) {
		var q ruleRequest
		if err := decode(httptest.NewRecorder(), httptest.NewRequest("POST", "/admin/v1/rules", strings.NewReader(body)), &q); err != nil {
			return sluice.Rule{}, false, err
		}
		r, err := q.rule()
		return r.Rule, !r.Disabled, err
	}
	full := `{"name":"n","org":"acme","kind":"budget","subject":"workspace+user","metric":"cost","limit":"$0.00001","burst":3,"window":"90s",` +
		`"period":"month","time_zone":"Europe/Paris","soft_limit":"$0.000008","warn_at":[0.5,0.9],"reserve":"fixed","reserve_amount":0.000002,` +
		`"on_expiry":"release","on_store_error":"open","fit":"clamp","min_output_tokens":5,` +
		`"match":{"models":["a"],"tiers":["t"],"routes":["/v1/x"]},"mode":"shadow","enabled":false}`
	want := sluice.Rule{
		Name: "n", Org: "acme", Kind: sluice.KindBudget, Subject: "workspace+user", Metric: sluice.MetricCost,
		Limit: 10, Burst: 3, Window: 90 * time.Second, Period: sluice.PeriodMonth, TimeZone: "Europe/Paris",
		SoftLimit: 8, WarnAt: []float64{0.5, 0.9}, Reserve: sluice.ReserveFixed, ReserveAmount: 2,
		OnExpiry: sluice.ExpiryRelease, OnStoreError: sluice.StoreErrorOpen, Fit: "clamp", MinOutputTokens: 5,
		Match: sluice.Match{Models: []string{"a"}, Tiers: []string{"t"}, Routes: []string{"/v1/x"}}, Mode: sluice.ModeShadow,
		Disabled: true,
	}
	got, enabled, err := decodeRule(full)
	if err != nil || enabled || !reflect.DeepEqual(got, want) {
		t.Errorf("full body: %#v, enabled %v, %v\nwant %#v", got, enabled, err, want)
	}
	if _, enabled, err := decodeRule(`{"name":"a","kind":"rate","subject":"user","limit":0,"window":"1m"}`); err != nil || !enabled {
		t.Errorf("enabled left out: enabled %v, %v; want true", enabled, err)
	}
	for _, tt := range []struct{ body, code, message string }{
		{`{"name":"a","kind":"rate","subject":"user","window":"1m"}`, "invalid", "limit is required (0 disables the rule)"},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"window":60}`, "invalid_body", "want a duration string such as \"1m\" or \"90s\", got 60"},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"window":null}`, "invalid_body", "want a duration string such as \"1m\" or \"90s\": time: invalid duration \"\""},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"window":"1x"}`, "invalid_body", "want a duration string such as \"1m\" or \"90s\": time: unknown unit \"x\" in duration \"1x\""},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"source":"config"}`, "unknown_field", "unknown field \"source\""},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"disabled":true}`, "unknown_field", "unknown field \"disabled\""},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"created_at":"2026-01-01T00:00:00Z"}`, "unknown_field", "unknown field \"created_at\""},
		{`{"name":"a","kind":"rate","subject":"user","limit":"1"}`, "invalid_field", "field \"limit\": want an integer, got string"},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"match":{"model":["x"]}}`, "unknown_field", "unknown field \"model\""},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"match":{"models":"x"}}`, "invalid_field", "field \"match.models\": want an array, got string"},
		{`{"name":"a","kind":5,"subject":"user","limit":1}`, "invalid_field", "field \"kind\": want a string, got number"},
		{`{"name":"a","kind":"rate","subject":"user","limit":1,"enabled":"yes"}`, "invalid_field", "field \"enabled\": want true or false, got string"},
	} {
		_, _, err := decodeRule(tt.body)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Code != tt.code || ae.Message != tt.message {
			t.Errorf("%s: %v, want %s: %s", tt.body, err, tt.code, tt.message)
		}
	}
}

// TestRuleAPI_EveryFieldRoundTrips: a rule with every field of sluice.Rule
// set (a field added later included) is read from a request body, and
// written back in a stored rule and in the policy, unchanged.
func TestRuleAPI_EveryFieldRoundTrips(t *testing.T) {
	want := ruletest.Filled(t)
	read := func(what string, body []byte) sluice.Rule {
		t.Helper()
		var q ruleRequest
		if err := decode(httptest.NewRecorder(), httptest.NewRequest("POST", "/admin/v1/rules", bytes.NewReader(body)), &q); err != nil {
			t.Fatalf("%s %s: %v", what, body, err)
		}
		r, err := q.rule()
		if err != nil {
			t.Fatalf("%s %s: %v", what, body, err)
		}
		return r.Rule
	}
	body, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := read("request", body); !reflect.DeepEqual(got, want) {
		t.Errorf("request body %s\nread as %#v\nwant %#v", body, got, want)
	}
	stored, err := json.Marshal(ruleOutOf(catalog.Rule{Rule: want}))
	if err != nil {
		t.Fatal(err)
	}
	if got := read("stored rule", stored); !reflect.DeepEqual(got, want) {
		t.Errorf("stored rule written as %s\nread back as %#v\nwant %#v", stored, got, want)
	}
	sourced := want
	sourced.Source = "rule"
	policy, err := json.Marshal(policyRule{sourced})
	if err != nil {
		t.Fatal(err)
	}
	var inForce struct {
		sluice.RuleJSON
		Source string `json:"source"`
	}
	if err := json.Unmarshal(policy, &inForce); err != nil || !reflect.DeepEqual(inForce.Rule(), want) || inForce.Source != "rule" {
		t.Errorf("policy rule written as %s\nread back as %#v, source %q, %v\nwant %#v", policy, inForce.Rule(), inForce.Source, err, want)
	}
}

// TestOpenAPI_DescribesEveryRuleField: each field of a rule's JSON (every
// field of sluice.Rule, a field added later included) is a property of the
// Rule and RuleRequest schemas of admin/openapi.json.
func TestOpenAPI_DescribesEveryRuleField(t *testing.T) {
	d := loadOpenAPI(t)
	stored := catalog.Rule{Rule: ruletest.Filled(t), CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(2, 0)}
	for schema, rule := range map[string]any{"Rule": ruleOutOf(stored), "RuleRequest": stored.Rule} {
		b, err := json.Marshal(rule)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		properties := d.doc.Components.Schemas[schema].Value.Properties
		for name := range fields {
			if _, ok := properties[name]; !ok {
				t.Errorf("field %q of a rule is not a property of the %s schema in admin/openapi.json", name, schema)
			}
		}
	}
}
