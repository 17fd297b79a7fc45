package admin

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Circuit is one deployment's circuit breaker (a provider serving one
// model), as the gateway reports it.
type Circuit struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Open     bool   `json:"open"`
	// RetryAt is when an open circuit lets its next probe through.
	RetryAt time.Time `json:"retry_at,omitzero"`
}

// circuits answers GET /admin/v1/circuits: this replica's deployments that
// have failed since it started, open or closed again (circuits are each
// replica's own).
func (h *Handler) circuits(w http.ResponseWriter, r *http.Request, _ *principal) error {
	if err := checkParams(r.URL.Query()); err != nil {
		return err
	}
	list := []Circuit{}
	if h.opts.Circuits != nil {
		list = append(list, h.opts.Circuits()...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"circuits": list})
	return nil
}

var circuitOpenDesc = prometheus.NewDesc("sluice_circuit_open",
	"1 while the circuit of a deployment (a provider serving one model) is open: the deployment is skipped, as a refusing model is, until a probe succeeds; 0 once a deployment that failed is closed again.",
	[]string{"provider", "model"}, nil)

// WatchCircuits exports, read at each scrape, sluice_circuit_open for every
// deployment that has failed since the process started (the label set is
// bounded by the models the configuration serves).
func (m *Metrics) WatchCircuits(circuits func() []Circuit) {
	m.reg.MustRegister(circuitCollector(circuits))
}

type circuitCollector func() []Circuit

func (c circuitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- circuitOpenDesc }

func (c circuitCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cs := range c() {
		open := 0.0
		if cs.Open {
			open = 1
		}
		ch <- prometheus.MustNewConstMetric(circuitOpenDesc, prometheus.GaugeValue, open, cs.Provider, cs.Model)
	}
}

// LiveConnection is a live connection (the Realtime API over WebSocket)
// open in the gateway's process, as the console lists it.
type LiveConnection struct {
	RequestID, Org, Workspace, KeyID, User, Model, Provider, Session string
	Opened                                                           time.Time
	Responses                                                        int64
}
