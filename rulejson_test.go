package sluice_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ruletest"
)

// TestRuleJSON_EveryFieldRoundTrips: every field of Rule but Source is
// written by its JSON form and read back, each duration as a duration
// string and Disabled as enabled.
func TestRuleJSON_EveryFieldRoundTrips(t *testing.T) {
	r := ruletest.Filled(t)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got sluice.Rule
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("read back as\n%#v\nwant\n%#v\nfrom %s", got, r, b)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for f := range reflect.TypeFor[sluice.Rule]().Fields() {
		if f.Type != reflect.TypeFor[time.Duration]() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		s, _ := fields[name].(string)
		if d, err := time.ParseDuration(s); err != nil || d != reflect.ValueOf(r).FieldByIndex(f.Index).Interface() {
			t.Errorf("%s is written as %s: %v = %v, want a duration string (give it a Duration in RuleJSON)", f.Name, name, fields[name], err)
		}
	}
	if fields["enabled"] != false || fields["disabled"] != nil || fields["source"] != nil {
		t.Errorf("enabled %v, disabled %v, source %v: want false, absent, absent", fields["enabled"], fields["disabled"], fields["source"])
	}
}

// TestRuleJSON_Form: a rule's JSON names, enabled by default, and the
// durations that are refused.
func TestRuleJSON_Form(t *testing.T) {
	r := sluice.Rule{Name: "a", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute, Source: "config"}
	const want = `{"name":"a","kind":"rate","subject":"key","limit":1,"window":"1m0s","enabled":true}`
	if b, err := json.Marshal(r); err != nil || string(b) != want {
		t.Errorf("marshal = %s, %v; want %s", b, err, want)
	}
	var got sluice.Rule
	if err := json.Unmarshal([]byte(`{"name":"a","kind":"rate","subject":"key","limit":1,"window":"1m"}`), &got); err != nil || got.Disabled || got.Window != time.Minute {
		t.Errorf("enabled left out: %+v, %v; want enabled, a minute", got, err)
	}
	for _, bad := range []string{`{"window":60}`, `{"busy_retry_after":"soon"}`, `{"enabled":"yes"}`, `[]`} {
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
