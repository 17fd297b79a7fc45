package admin

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/gateway/event"
)

// knownLiveCauses are the causes a live connection ends with
// (event.Event.LiveCause).
var knownLiveCauses = []string{"client_gone", "provider_gone", "provider_close", "ceiling", "budget", "seconds",
	"store_unavailable", "session_closed", "max_duration", "frame_too_large", "shutdown"}

// liveMetrics are the series of live connections (GET /v1/realtime).
type liveMetrics struct {
	closes  *prometheus.CounterVec
	seconds prometheus.Counter
}

func newLiveMetrics(reg prometheus.Registerer) liveMetrics {
	l := liveMetrics{
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_live_closes_total",
			Help: "Live connections ended, by close code and cause (ceiling, budget, seconds: a quota close, 1011; client_gone, provider_gone, provider_close, store_unavailable, session_closed, max_duration, frame_too_large, shutdown).",
		}, []string{"code", "cause"}),
		seconds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_live_seconds_total",
			Help: "Wall-clock seconds of the live connections ended (the seconds metric, counted at each close).",
		}),
	}
	reg.MustRegister(l.closes, l.seconds)
	return l
}

// observe counts the end of a live connection.
func (l liveMetrics) observe(e *event.Event) {
	if e.LiveClose == 0 {
		return
	}
	l.closes.WithLabelValues(strconv.Itoa(e.LiveClose), bounded(e.LiveCause, knownLiveCauses)).Inc()
	l.seconds.Add(e.LiveSeconds.Seconds())
}

// LiveConnections registers sluice_live_connections, read from open at
// each scrape (the gateway's Gateway.LiveConnections).
func (m *Metrics) LiveConnections(open func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_live_connections",
		Help: "Live connections (GET /v1/realtime) open in this process.",
	}, func() float64 { return float64(open()) }))
}
