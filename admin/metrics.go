package admin

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// MetricsOptions configures Metrics.
type MetricsOptions struct {
	// Models maps every model name and alias a client may use to the
	// model's name. The model label takes only these names; any other is
	// "other", so a client cannot grow the label set.
	Models map[string]string
	// Registry receives the collectors; nil means a new registry with the
	// Go and process collectors.
	Registry *prometheus.Registry
}

// The label values Metrics accepts; anything else is "other".
var (
	knownRoutes   = []string{"chat", "responses", "embeddings", "messages", "models", "sessions"}
	knownOutcomes = []string{"admitted", "rate_limited", "busy", "budget_exceeded", "too_large", "store_error",
		"upstream_error", "bad_request", "unauthorized", "client_gone"}
	knownClasses = []string{"throttled", "terminal", "transient"}
)

// Metrics holds Sluice's Prometheus series, named sluice_*. Labels are
// bounded: route, model (from the configured list), outcome, class,
// direction, operation; never a user, key or workspace. It is safe for
// concurrent use.
type Metrics struct {
	reg    *prometheus.Registry
	models map[string]string

	requests    *prometheus.CounterVec
	tokens      *prometheus.CounterVec
	cost        *prometheus.CounterVec
	decision    *prometheus.HistogramVec
	attempts    *prometheus.HistogramVec
	attemptsSum *prometheus.CounterVec
	storeTime   *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	overruns    prometheus.Counter
	sweeps      prometheus.Counter
	swept       *prometheus.CounterVec

	mu     sync.Mutex
	stores []*instrumentedStore
}

// NewMetrics registers Sluice's series and returns them.
func NewMetrics(opts MetricsOptions) *Metrics {
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &Metrics{reg: reg, models: map[string]string{}}
	for alias, name := range opts.Models {
		m.models[alias] = name
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_requests_total",
		Help: "Client requests by route, model, outcome (admitted, rate_limited, busy, budget_exceeded, too_large, store_error, upstream_error, ...) and failure class (throttled, terminal, transient; empty when admitted).",
	}, []string{"route", "model", "outcome", "class"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_tokens_total",
		Help: "Tokens settled, by direction (input, output, cached_input) and model.",
	}, []string{"direction", "model"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_cost_microdollars_total",
		Help: "Cost settled in micro-dollars, by model.",
	}, []string{"model"})
	m.decision = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_decision_seconds",
		Help:    "Time spent deciding admission per client request (limiter and store).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"route"})
	m.attempts = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_upstream_attempts",
		Help:    "Upstream attempts per client request that reached a provider (retry amplification; 1 means no retry).",
		Buckets: []float64{1, 2, 3, 4, 5, 8},
	}, []string{"route"})
	m.attemptsSum = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_upstream_attempts_total",
		Help: "Upstream attempts made; divided by sluice_requests_total it is the retry amplification.",
	}, []string{"route"})
	m.storeTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_store_seconds",
		Help:    "Latency of store operations (admit, settle, peek, sweep).",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5},
	}, []string{"operation"})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_store_errors_total",
		Help: "Store operations that failed, by operation.",
	}, []string{"operation"})
	m.overruns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_reservation_overruns_total",
		Help: "Settlements that charged more than was reserved (the overrun is charged in full).",
	})
	m.sweeps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_sweeps_total",
		Help: "Sweeps of expired reservations run.",
	})
	m.swept = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_swept_reservations_total",
		Help: "Reservations settled by a sweep, by what happened to their budget charges (charged, released; reservations for all).",
	}, []string{"result"})
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_in_flight",
		Help: "Calls admitted and not yet settled in this process.",
	}, func() float64 {
		n := 0
		for _, s := range m.storesSnapshot() {
			n += s.inFlight()
		}
		return float64(n)
	})
	reg.MustRegister(m.requests, m.tokens, m.cost, m.decision, m.attempts, m.attemptsSum, m.storeTime,
		m.storeErrors, m.overruns, m.sweeps, m.swept, inFlight)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Store wraps s so that its latency, sweeps and open reservations are
// measured. Give the wrapped store to the Limiter.
func (m *Metrics) Store(s sluice.Store) sluice.Store {
	is := &instrumentedStore{Store: s, m: m, open: map[uint64]*openBatch{}}
	m.mu.Lock()
	m.stores = append(m.stores, is)
	m.mu.Unlock()
	return is
}

func (m *Metrics) storesSnapshot() []*instrumentedStore {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.stores)
}

// reserved is what open reservations hold on one counter.
func (m *Metrics) reserved(key sluice.CounterKey) int64 {
	var sum int64
	for _, s := range m.storesSnapshot() {
		sum += s.reserved(key)
	}
	return sum
}

// OnOverrun counts an overrun; pass it as sluice.Options.OnOverrun.
func (m *Metrics) OnOverrun(sluice.Overrun) { m.overruns.Inc() }

// Observe counts one finished client request; pass it (or a function
// calling it) as gateway.Options.Observer.
func (m *Metrics) Observe(e gateway.Event) {
	route := bounded(e.Route, knownRoutes)
	model := m.model(e.Model)
	m.requests.WithLabelValues(route, model, bounded(e.Outcome, knownOutcomes), boundedClass(e.Class)).Inc()
	if e.Decision > 0 {
		m.decision.WithLabelValues(route).Observe(e.Decision.Seconds())
	}
	if e.Attempts > 0 {
		m.attempts.WithLabelValues(route).Observe(float64(e.Attempts))
		m.attemptsSum.WithLabelValues(route).Add(float64(e.Attempts))
	}
	u := e.Usage
	for _, d := range []struct {
		direction string
		n         int64
	}{{"input", u.InputTokens}, {"output", u.OutputTokens}, {"cached_input", u.CachedInputTokens}} {
		if d.n > 0 {
			m.tokens.WithLabelValues(d.direction, model).Add(float64(d.n))
		}
	}
	if u.Cost > 0 {
		m.cost.WithLabelValues(model).Add(float64(u.Cost))
	}
}

func (m *Metrics) model(name string) string {
	if name == "" {
		return "none"
	}
	if canonical, ok := m.models[name]; ok {
		return canonical
	}
	return "other"
}

func bounded(v string, known []string) string {
	if slices.Contains(known, v) {
		return v
	}
	if v == "" {
		return "none"
	}
	return "other"
}

func boundedClass(v string) string {
	if v == "" {
		return ""
	}
	return bounded(v, knownClasses)
}

func (m *Metrics) observeStore(op string, start time.Time, err error) {
	m.storeTime.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) observeSweep(res sluice.SweepResult) {
	m.sweeps.Inc()
	m.swept.WithLabelValues("reservations").Add(float64(res.Reservations))
	m.swept.WithLabelValues("charged").Add(float64(res.Charged))
	m.swept.WithLabelValues("released").Add(float64(res.Released))
}
