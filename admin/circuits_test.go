package admin

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics_CircuitOpen(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	m.WatchCircuits(func() []Circuit {
		return []Circuit{{Provider: "oa", Model: "gpt-4o", Open: true}, {Provider: "an", Model: "claude", Open: false}}
	})
	want := `
# HELP sluice_circuit_open 1 while the circuit of a deployment (a provider serving one model) is open: the deployment is skipped, as a refusing model is, until a probe succeeds; 0 once a deployment that failed is closed again.
# TYPE sluice_circuit_open gauge
sluice_circuit_open{model="claude",provider="an"} 0
sluice_circuit_open{model="gpt-4o",provider="oa"} 1
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "sluice_circuit_open"); err != nil {
		t.Fatal(err)
	}
}
