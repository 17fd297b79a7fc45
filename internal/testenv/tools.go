package testenv

import "testing"

// HelmVar names the helm binary that the chart's tests run (.ci/run
// installs helm and sets it), and HelmExample a value for it.
const (
	HelmVar     = "SLUICE_TEST_HELM"
	HelmExample = "$(go env GOPATH)/bin/helm, after go install helm.sh/helm/v3/cmd/helm@v3.22.0"
)

// Helm returns SLUICE_TEST_HELM. Unset, tb is skipped, unless CI=true,
// where it fails.
func Helm(tb testing.TB) string {
	tb.Helper()
	return lookup(tb, HelmVar)
}
