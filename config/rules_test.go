package config

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/ruletest"
	"go.yaml.in/yaml/v3"
)

// TestRule_EveryFieldSurvivesTheFile: a rule with every field of
// sluice.Rule set (a field added later included) is written as YAML and
// read back strictly, unchanged, but for Org: the file holds the
// deployment's rules, an org's are stored in the catalog.
func TestRule_EveryFieldSurvivesTheFile(t *testing.T) {
	want := ruletest.Filled(t)
	want.Org = ""
	enabled := !want.Disabled
	out, err := yaml.Marshal(Rule{Rule: want, Enabled: &enabled})
	if err != nil {
		t.Fatal(err)
	}
	var back Rule
	if err := yaml.Unmarshal(out, &back); err != nil {
		t.Fatalf("read back %s: %v", out, err)
	}
	if got := back.SluiceRule(); !reflect.DeepEqual(got, want) {
		t.Errorf("written as\n%s\nread back as %#v\nwant %#v", out, got, want)
	}
	var withOrg Rule
	if err := yaml.Unmarshal([]byte("org: acme\n"), &withOrg); err == nil {
		t.Error("a rule with an org was read from the file")
	}
}
