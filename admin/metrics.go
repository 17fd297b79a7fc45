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
	"github.com/sluicehq/sluice/gateway/event"
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
	knownRoutes   = []string{"chat", "responses", "embeddings", "messages", "count_tokens", "models", "sessions"}
	knownOutcomes = []string{"admitted", "rate_limited", "busy", "budget_exceeded", "too_large", "store_error",
		"upstream_error", "bad_request", "unauthorized", "client_gone", "session_ceiling", "too_many_sessions"}
	knownClasses  = []string{"throttled", "terminal", "transient"}
	knownCeilings = []string{"wall_clock", "turns", "tokens", "cost", "context"}
	knownIdentity = []string{event.HeaderWorkspace, event.HeaderUser, event.HeaderTeam}
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
	storeTimeOf [len(storeOpNames)]prometheus.Observer
	overruns    prometheus.Counter
	sweeps      prometheus.Counter
	swept       *prometheus.CounterVec
	sessions    *prometheus.CounterVec
	sessionCost prometheus.Histogram
	sessionTurn prometheus.Histogram
	ignoredID   *prometheus.CounterVec
	impossible  prometheus.Counter

	seriesCache sync.Map // seriesKey -> *requestSeries

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
	m.sessions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_sessions_total",
		Help: "Sessions opened, closed by their client, and reaching a ceiling (once per session, by ceiling: wall_clock, turns, tokens, cost). The share of sessions that hit a ceiling is ceiling_reached over opened.",
	}, []string{"event", "ceiling"})
	m.sessionCost = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_session_cost_microdollars",
		Help:    "Cost of each session its client closed, in micro-dollars: the cost per completed session.",
		Buckets: prometheus.ExponentialBuckets(1000, 4, 12), // 0.1 cent to ~4,200 dollars
	})
	m.sessionTurn = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_session_turns",
		Help:    "Turns (calls) of each session its client closed.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500},
	})
	m.ignoredID = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_identity_headers_ignored_total",
		Help: "Identity headers (X-Sluice-Workspace, X-Sluice-User, X-Sluice-Team) ignored because the request's key may not assert them, by header.",
	}, []string{"header"})
	m.impossible = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_impossible_usage_total",
		Help: "Calls whose provider reported more usage than they could produce (over the model's context window plus the output cap): not believed, charged their reservation.",
	})
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
	for op, name := range storeOpNames {
		m.storeTimeOf[op] = m.storeTime.WithLabelValues(name)
	}
	reg.MustRegister(m.requests, m.tokens, m.cost, m.decision, m.attempts, m.attemptsSum, m.storeTime,
		m.storeErrors, m.overruns, m.sweeps, m.swept, m.sessions, m.sessionCost, m.sessionTurn, m.ignoredID, m.impossible, inFlight)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Store wraps s so that its latency, sweeps and open reservations are
// measured. Give the wrapped store to the Limiter.
func (m *Metrics) Store(s sluice.Store) sluice.Store {
	is := &instrumentedStore{Store: s, m: m, open: map[uint64]openBatch{}}
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

// seriesKey is the bounded label set of one request's series.
type seriesKey struct{ route, model, outcome, class string }

// requestSeries are the series one kind of request touches, resolved once:
// a label lookup hashes every value, and Observe runs on every request.
type requestSeries struct {
	requests              prometheus.Counter
	decision, attempts    prometheus.Observer
	attemptsSum           prometheus.Counter
	input, output, cached prometheus.Counter
	cost                  prometheus.Counter
}

func (m *Metrics) series(k seriesKey) *requestSeries {
	if s, ok := m.seriesCache.Load(k); ok {
		return s.(*requestSeries)
	}
	s := &requestSeries{
		requests:    m.requests.WithLabelValues(k.route, k.model, k.outcome, k.class),
		decision:    m.decision.WithLabelValues(k.route),
		attempts:    m.attempts.WithLabelValues(k.route),
		attemptsSum: m.attemptsSum.WithLabelValues(k.route),
		input:       m.tokens.WithLabelValues("input", k.model),
		output:      m.tokens.WithLabelValues("output", k.model),
		cached:      m.tokens.WithLabelValues("cached_input", k.model),
		cost:        m.cost.WithLabelValues(k.model),
	}
	actual, _ := m.seriesCache.LoadOrStore(k, s)
	return actual.(*requestSeries)
}

// Observe counts one finished client request; pass it (or a function
// calling it) as gateway.Options.Observer.
func (m *Metrics) Observe(e event.Event) {
	s := m.series(seriesKey{bounded(e.Route, knownRoutes), m.model(e.Model), bounded(e.Outcome, knownOutcomes), boundedClass(e.Class)})
	s.requests.Inc()
	switch e.Session {
	case "opened":
		m.sessions.WithLabelValues("opened", "none").Inc()
	case "closed":
		m.sessions.WithLabelValues("closed", "none").Inc()
		m.sessionCost.Observe(float64(e.SessionUsed.Cost))
		m.sessionTurn.Observe(float64(e.SessionUsed.Turns))
	case "ceiling":
		m.sessions.WithLabelValues("ceiling_reached", bounded(e.Ceiling, knownCeilings)).Inc()
	}
	if e.ImpossibleUsage {
		m.impossible.Inc()
	}
	for _, h := range e.IgnoredIdentity {
		m.ignoredID.WithLabelValues(bounded(h, knownIdentity)).Inc()
	}
	if e.Decision > 0 {
		s.decision.Observe(e.Decision.Seconds())
	}
	if e.Attempts > 0 {
		s.attempts.Observe(float64(e.Attempts))
		s.attemptsSum.Add(float64(e.Attempts))
	}
	u := e.Usage
	if u.InputTokens > 0 {
		s.input.Add(float64(u.InputTokens))
	}
	if u.OutputTokens > 0 {
		s.output.Add(float64(u.OutputTokens))
	}
	if u.CachedInputTokens > 0 {
		s.cached.Add(float64(u.CachedInputTokens))
	}
	if u.Cost > 0 {
		s.cost.Add(float64(u.Cost))
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

// storeOp indexes the store operations, whose series are resolved once.
type storeOp int

const (
	opAdmit storeOp = iota
	opSettle
	opPeek
	opSweep
)

var storeOpNames = [...]string{"admit", "settle", "peek", "sweep"}

func (m *Metrics) observeStore(op storeOp, start time.Time, err error) {
	m.storeTimeOf[op].Observe(time.Since(start).Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(storeOpNames[op]).Inc()
	}
}

func (m *Metrics) observeSweep(res sluice.SweepResult) {
	m.sweeps.Inc()
	m.swept.WithLabelValues("reservations").Add(float64(res.Reservations))
	m.swept.WithLabelValues("charged").Add(float64(res.Charged))
	m.swept.WithLabelValues("released").Add(float64(res.Released))
}
