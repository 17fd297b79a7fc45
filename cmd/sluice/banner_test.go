package main

import (
	"bytes"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// The banner lists the built-in rules in force and how to turn each off,
// and its keys create hint keeps the --data serve was given, so that the
// key is made in the data directory the server reads.
func TestBanner_BuiltInRulesAndTheDataFlag(t *testing.T) {
	data := filepath.Join(t.TempDir(), "my data")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c common
	c.register(fs)
	if err := parseFlags(fs, []string{"--data", data}); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Knobs = map[string]int64{config.VarMaxInFlight: 0}
	var out bytes.Buffer
	printBanner(&out, cfg, &c, "", cfg.EffectiveRules())
	for _, want := range []string{
		"rate_per_minute: 20 requests per minute per workspace+user; SLUICE_RATE_PER_MINUTE=0 turns it off",
		"daily_token_budget: 2,000,000 tokens per day per workspace; SLUICE_DAILY_TOKEN_BUDGET=0 turns it off",
		"keys create --data '" + data + "' --workspace demo --user me",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "max_in_flight:") {
		t.Errorf("banner lists max_in_flight, turned off by SLUICE_MAX_IN_FLIGHT=0:\n%s", out.String())
	}
}

// sluice check lists the built-in rules in force and how to turn each off.
func TestCheck_ListsBuiltInRules(t *testing.T) {
	t.Setenv(config.VarRatePerMinute, "0")
	var out bytes.Buffer
	if err := checkTo(&out, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Built-in rules in force") ||
		!strings.Contains(out.String(), "max_in_flight: 16 calls in flight per server; SLUICE_MAX_IN_FLIGHT=0 turns it off") {
		t.Errorf("check does not list the built-in rules:\n%s", out.String())
	}
	if strings.Contains(out.String(), "rate_per_minute: 20") {
		t.Errorf("check lists rate_per_minute, turned off by SLUICE_RATE_PER_MINUTE=0:\n%s", out.String())
	}
}
