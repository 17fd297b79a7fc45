package sluice_test

import (
	"encoding/json"
	"fmt"
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
	durationsAreStrings(t, "rule", reflect.TypeFor[sluice.Rule](), fields)
	if fields["enabled"] != false || fields["disabled"] != nil || fields["source"] != nil {
		t.Errorf("enabled %v, disabled %v, source %v: want false, absent, absent", fields["enabled"], fields["disabled"], fields["source"])
	}
}

// durationsAreStrings checks that every time.Duration of v, the JSON of a
// value of type typ (nested fields included), was written as a duration
// string, not as encoding/json's nanoseconds.
func durationsAreStrings(t *testing.T, path string, typ reflect.Type, v any) {
	t.Helper()
	switch {
	case typ == reflect.TypeFor[time.Duration]():
		if s, ok := v.(string); !ok {
			t.Errorf("%s is written as %v, not a duration string: in a rule's JSON a duration is a sluice.Duration", path, v)
		} else if _, err := time.ParseDuration(s); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	case typ.Kind() == reflect.Pointer, typ.Kind() == reflect.Slice && typ.Elem().Kind() != reflect.Uint8:
		list, _ := v.([]any)
		if typ.Kind() == reflect.Pointer {
			list = []any{v}
		}
		for i, e := range list {
			durationsAreStrings(t, fmt.Sprintf("%s[%d]", path, i), typ.Elem(), e)
		}
	case typ.Kind() == reflect.Map:
		m, _ := v.(map[string]any)
		for k, e := range m {
			durationsAreStrings(t, path+"."+k, typ.Elem(), e)
		}
	case typ.Kind() == reflect.Struct:
		m, _ := v.(map[string]any)
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if f.IsExported() && name != "-" {
				durationsAreStrings(t, path+"."+name, f.Type, m[name])
			}
		}
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
