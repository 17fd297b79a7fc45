package testenv

import (
	"os"
	"testing"
)

// HelmVar names the helm binary that the chart's tests run (.ci/run
// installs helm and sets it).
const HelmVar = "SLUICE_TEST_HELM"

// Helm returns SLUICE_TEST_HELM. Unset, tb is skipped, unless CI=true,
// where it fails.
func Helm(tb testing.TB) string {
	tb.Helper()
	if v := os.Getenv(HelmVar); v != "" {
		return v
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s is not set and CI=true: the chart's tests must run in CI", HelmVar)
	}
	tb.Skipf("%s is not set (e.g. %s=$(go env GOPATH)/bin/helm after go install helm.sh/helm/v3/cmd/helm@v3.22.0)", HelmVar, HelmVar)
	return ""
}
