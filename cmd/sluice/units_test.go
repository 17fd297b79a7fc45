package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck_PrintsEveryLimitWithItsUnit: sluice check writes each limit
// with its unit and what it is per, money in dollars, and warns on a cost
// limit under a cent; a limit written in micro-dollars the old way is
// refused with what to write.
func TestCheck_PrintsEveryLimitWithItsUnit(t *testing.T) {
	t.Setenv("SLUICE_ENV", "")
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	yaml := `rules:
  - {name: spend, kind: budget, subject: org, metric: cost, limit: $500, period: month}
  - {name: crumbs, kind: budget, subject: workspace, metric: cost, limit: $0.005, period: day}
  - {name: tpd, kind: budget, subject: workspace, metric: tokens, limit: 2000000, period: day}
  - {name: rpm, kind: rate, subject: key, limit: 20, window: 1m}
  - {name: five, kind: concurrency, subject: user, limit: 5}
  - {name: provider_rpm, kind: rate, subject: model, limit: 100, window: 1m, limit_from: provider}
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := checkTo(&out, []string{"--config", path}); err != nil {
		t.Fatalf("check: %v\n%s", err, &out)
	}
	for _, want := range []string{
		"$500.00 per month", "$0.005 per day", "2,000,000 tokens per day", "20 requests per minute", "5 calls in flight",
		"100 requests per minute, then the provider's",
		`warning: limit "crumbs" is $0.005 per day, under a cent`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, &out)
		}
	}
	if strings.Contains(out.String(), `limit "spend" is`) {
		t.Errorf("a $500 limit was warned about:\n%s", &out)
	}
	old := strings.Replace(yaml, "limit: $500,", "limit: 500000000,", 1)
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err := checkTo(&out, []string{"--config", path})
	if err == nil || !strings.Contains(err.Error(), "limit: $500.00") || !strings.Contains(err.Error(), "written in dollars") {
		t.Fatalf("a micro-dollar limit: %v", err)
	}
}
