package admin

import (
	"context"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway/event"
)

// MetricsOptions configures Metrics.
type MetricsOptions struct {
	// Models maps every model name and alias a client may use to the
	// model's name. The model label takes only these names; any other (and
	// a request that named none) is "other", so a client cannot grow the
	// label set.
	Models map[string]string
	// Providers are the configured providers' names, which the provider
	// label takes; any other is "other", and "none" means no provider was
	// called.
	Providers []string
	// Registry receives the collectors; nil means a new registry with the
	// Go and process collectors.
	Registry *prometheus.Registry
}

// The label values Metrics accepts; anything else is "other".
var (
	knownRoutes   = []string{"chat", "responses", "embeddings", "messages", "count_tokens", "models", "sessions", "realtime", "client_secrets"}
	knownOutcomes = []string{"admitted", "rate_limited", "busy", "budget_exceeded", "too_large", "store_error",
		"upstream_error", "bad_request", "unauthorized", "client_gone", "session_ceiling", "too_many_sessions"}
	knownClasses  = []string{"throttled", "terminal", "transient"}
	knownCeilings = []string{"wall_clock", "turns", "tokens", "cost", "context"}
	knownIdentity = []string{event.HeaderWorkspace, event.HeaderUser, event.HeaderTeam, event.HeaderTurn}
)

// latencyBuckets suit LLM calls: a refusal answers in well under 10 ms, a
// short completion in hundreds of milliseconds, a long generation or an
// agent's stream in minutes.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}

// maxRuleLabels bounds the rule label: rule names come from the policy,
// which the operator controls, but a catalog may hold many orgs' rules.
// Past this many names the rest count as "other".
const maxRuleLabels = 500

// Metrics holds Sluice's Prometheus series, named sluice_*. Labels are
// bounded: route, model (from the configured list), provider (likewise),
// outcome, class, upstream status class, direction, operation, rule;
// never a user, key or workspace (but for the workspaces an operator lists
// for headroom gauges). It is safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	models    map[string]string
	providers []string

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
	swept       prometheus.Counter
	sweptBudget *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	upstream    *prometheus.HistogramVec
	firstToken  *prometheus.HistogramVec
	failedOpen  *prometheus.CounterVec
	shadowed    *prometheus.CounterVec
	classAdmits *prometheus.CounterVec
	classRefuse *prometheus.CounterVec
	sessions    *prometheus.CounterVec
	sessionCost prometheus.Histogram
	sessionTurn prometheus.Histogram
	ignoredID   *prometheus.CounterVec
	impossible  prometheus.Counter
	cache       *prometheus.CounterVec
	cacheSaved  *prometheus.CounterVec
	live        liveMetrics // livemetrics.go

	seriesCache sync.Map // seriesKey -> *requestSeries

	mu     sync.Mutex
	stores []*instrumentedStore
	rules  map[string]bool // rule label values in use
}

// NewMetrics registers Sluice's series and returns them.
func NewMetrics(opts MetricsOptions) *Metrics {
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &Metrics{reg: reg, models: map[string]string{}, providers: slices.Clone(opts.Providers), rules: map[string]bool{}}
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
		Name:    "sluice_upstream_attempts_per_request",
		Help:    "Upstream attempts per client request that reached a provider (retry amplification, _sum over _count; 1 means no retry).",
		Buckets: []float64{1, 2, 3, 4, 5, 8},
	}, []string{"route"})
	m.attemptsSum = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_upstream_attempts_total",
		Help: "Upstream attempts made, with the labels of sluice_requests_total: divided by it, series by series, it is the attempts per request.",
	}, []string{"route", "model", "outcome", "class"})
	requestLabels := []string{"route", "model", "provider", "outcome", "upstream_status"}
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_request_duration_seconds",
		Help:    "Time from a client request's arrival to the end of its answer (a stream's last event), by route, model, provider, outcome and the provider's status class (2xx, 4xx, 5xx; none when no provider answered).",
		Buckets: latencyBuckets,
	}, requestLabels)
	m.upstream = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_upstream_duration_seconds",
		Help:    "Time spent on the provider that served (or last failed) a request: from its first attempt to the end of its answer, retries included.",
		Buckets: latencyBuckets,
	}, requestLabels)
	m.firstToken = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_time_to_first_token_seconds",
		Help:    "Streams: time from the request's arrival to the provider's first event.",
		Buckets: latencyBuckets,
	}, requestLabels)
	m.failedOpen = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_fail_open_admissions_total",
		Help: "Requests admitted uncharged because the limit store did not answer, by rule (each rule in play says on_store_error: open).",
	}, []string{"rule"})
	m.shadowed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_shadow_refusals_total",
		Help: "Admitted requests that a shadow rule would have refused, by rule.",
	}, []string{"rule"})
	// The class label takes a class rule's class names: at most 16 per
	// rule (the library's bound), from the policy.
	m.classAdmits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_class_admissions_total",
		Help: "Admissions by a rule with priority classes, by rule, the request's class, and share: own (its class's share admitted it) or borrowed (another class's idle share did).",
	}, []string{"rule", "class", "share"})
	m.classRefuse = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_class_refusals_total",
		Help: "Refusals by a rule with priority classes (after any wait), by rule and the request's class.",
	}, []string{"rule", "class"})
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
	m.swept = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_swept_reservations_total",
		Help: "Reservations settled by a sweep (past their deadline without a settlement).",
	})
	m.sweptBudget = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_swept_budget_charges_total",
		Help: "Budget charges of swept reservations, by what the rule's on_expiry did with them: charged or released.",
	}, []string{"result"})
	m.sessions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_sessions_total",
		Help: "Sessions opened, closed by their client (closed) or an admin (closed_by_admin), and reaching a ceiling (once per session, by ceiling: wall_clock, turns, tokens, cost, context; wall_clock also when it passes with no call). The share of sessions that hit a ceiling is ceiling_reached over opened.",
	}, []string{"event", "ceiling"})
	m.sessionCost = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_session_cost_microdollars",
		Help:    "Cost of each session when it ended, in micro-dollars: closed by its client or an admin, at its first ceiling, or when its wall clock passed; once per session. The cost per completed session.",
		Buckets: prometheus.ExponentialBuckets(1000, 4, 12), // 0.1 cent to ~4,200 dollars
	})
	m.sessionTurn = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_session_turns",
		Help:    "Turns (calls) of each session when it ended (as sluice_session_cost_microdollars).",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500},
	})
	m.ignoredID = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_identity_headers_ignored_total",
		Help: "Identity headers (X-Sluice-Workspace, X-Sluice-User, X-Sluice-Team) ignored because the request's key may not assert them, and X-Sluice-Turn from a key not allowed turns, by header.",
	}, []string{"header"})
	m.live = newLiveMetrics(reg)
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
		m.storeErrors.WithLabelValues(name)
	}
	// The series of known label values start at 0, so that rate() and the
	// shipped alerts see their first increase.
	m.sessions.WithLabelValues("opened", "none")
	m.sessions.WithLabelValues("closed", "none")
	m.sweptBudget.WithLabelValues("charged")
	m.sweptBudget.WithLabelValues("released")
	for _, h := range knownIdentity {
		m.ignoredID.WithLabelValues(h)
	}
	reg.MustRegister(m.requests, m.tokens, m.cost, m.decision, m.attempts, m.attemptsSum, m.storeTime,
		m.storeErrors, m.overruns, m.sweeps, m.swept, m.sweptBudget, m.sessions, m.sessionCost, m.sessionTurn, m.ignoredID,
		m.impossible, inFlight, m.duration, m.upstream, m.firstToken, m.failedOpen, m.shadowed, m.classAdmits, m.classRefuse, buildInfo())
	m.registerCache(reg)
	return m
}

// buildInfo is sluice_build_info, always 1, labelled with the binary's
// module version, VCS revision and Go version.
func buildInfo() prometheus.Collector {
	version, revision, goVersion := "unknown", "unknown", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sluice_build_info",
		Help:        "Always 1; its labels name the running build: version (the module's), revision (the VCS commit) and goversion.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	return g
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
	if _, ok := s.(sluice.LeaseRenewer); ok {
		return renewingStore{is}
	}
	return is
}

func (m *Metrics) storesSnapshot() []*instrumentedStore {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.stores)
}

// ReservedReader is a store that can say what open reservations hold on
// budget counters, as every process sharing the store sees them: the part
// of a budget's Used that calls in flight hold, on any replica.
type ReservedReader interface {
	// Reserved returns, for each key of a budget counter, the amount its
	// open reservations hold; 0 for a counter the store does not hold.
	Reserved(ctx context.Context, keys []sluice.CounterKey) ([]int64, error)
}

// reservedOf returns what open reservations hold on each budget counter
// of keys: read from the store when it is a ReservedReader (the
// reservations of every replica sharing it), else those open in this
// process.
func (m *Metrics) reservedOf(ctx context.Context, keys []sluice.CounterKey) ([]int64, error) {
	sum := make([]int64, len(keys))
	for _, s := range m.storesSnapshot() {
		if rr, ok := s.Store.(ReservedReader); ok {
			got, err := rr.Reserved(ctx, keys)
			if err != nil {
				return nil, &sluice.StoreError{Op: "reserved", Err: err}
			}
			for i := range sum {
				sum[i] += got[i]
			}
			continue
		}
		for i, k := range keys {
			sum[i] += s.reserved(k)
		}
	}
	return sum, nil
}

// OnOverrun counts an overrun; pass it as sluice.Options.OnOverrun.
func (m *Metrics) OnOverrun(sluice.Overrun) { m.overruns.Inc() }

// seriesKey is the bounded label set of one request's series.
type seriesKey struct{ route, model, provider, outcome, class, upstreamStatus string }

// requestSeries are the series one kind of request touches, resolved once:
// a label lookup hashes every value, and Observe runs on every request.
type requestSeries struct {
	requests              prometheus.Counter
	decision, attempts    prometheus.Observer
	duration, upstream    prometheus.Observer
	firstToken            prometheus.Observer
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
		attemptsSum: m.attemptsSum.WithLabelValues(k.route, k.model, k.outcome, k.class),
		duration:    m.duration.WithLabelValues(k.route, k.model, k.provider, k.outcome, k.upstreamStatus),
		upstream:    m.upstream.WithLabelValues(k.route, k.model, k.provider, k.outcome, k.upstreamStatus),
		firstToken:  m.firstToken.WithLabelValues(k.route, k.model, k.provider, k.outcome, k.upstreamStatus),
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
	s := m.series(seriesKey{bounded(e.Route, knownRoutes), m.model(e.Model), bounded(e.Provider, m.providers),
		bounded(e.Outcome, knownOutcomes), boundedClass(e.Class), statusClass(e.UpstreamStatus)})
	s.requests.Inc()
	if e.Duration > 0 {
		s.duration.Observe(e.Duration.Seconds())
	}
	if e.Upstream > 0 {
		s.upstream.Observe(e.Upstream.Seconds())
	}
	if e.FirstToken > 0 {
		s.firstToken.Observe(e.FirstToken.Seconds())
	}
	for _, r := range e.FailedOpen {
		m.failedOpen.WithLabelValues(m.rule(r)).Inc()
	}
	for _, r := range e.Shadowed {
		m.shadowed.WithLabelValues(m.rule(r)).Inc()
	}
	for _, cs := range e.Classes {
		share := "own"
		if cs.BorrowedFrom != "" {
			share = "borrowed"
		}
		m.classAdmits.WithLabelValues(m.rule(cs.Rule), cs.Class, share).Inc()
	}
	if cs := e.RefusedClass; cs != nil {
		m.classRefuse.WithLabelValues(m.rule(cs.Rule), cs.Class).Inc()
	}
	switch e.Session {
	case "opened":
		m.sessions.WithLabelValues("opened", "none").Inc()
	case "closed":
		m.sessions.WithLabelValues("closed", "none").Inc()
	case "ceiling":
		m.sessions.WithLabelValues("ceiling_reached", bounded(e.Ceiling, knownCeilings)).Inc()
	}
	if e.SessionEnded {
		m.sessionEnded(e.SessionUsed)
	}
	if e.ImpossibleUsage {
		m.impossible.Inc()
	}
	if e.Cache != "" {
		m.observeCache(e)
	}
	m.live.observe(&e)
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
	if canonical, ok := m.models[name]; ok {
		return canonical
	}
	return "other"
}

// rule returns the rule label for name: the name, while fewer than
// maxRuleLabels are in use.
func (m *Metrics) rule(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rules[name] {
		return name
	}
	if len(m.rules) >= maxRuleLabels {
		return "other"
	}
	m.rules[name] = true
	return name
}

// statusClass is an HTTP status's class, "2xx" to "5xx"; "none" when no
// provider answered.
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return statusClasses[status/100-1]
}

var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

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
	m.swept.Add(float64(res.Reservations))
	m.sweptBudget.WithLabelValues("charged").Add(float64(res.Charged))
	m.sweptBudget.WithLabelValues("released").Add(float64(res.Released))
}

// sessionEnded observes what a session used when it ended.
func (m *Metrics) sessionEnded(used event.SessionUsage) {
	m.sessionCost.Observe(float64(used.Cost))
	m.sessionTurn.Observe(float64(used.Turns))
}

// SessionEnded counts and observes a session that ended with no call of
// its own to say so: closed by an admin (ceiling ""), or found past its
// wall clock (ceiling "wall_clock", catalog.EndExpiredSessions). Observe
// counts those their client closed or a call found at a ceiling.
func (m *Metrics) SessionEnded(ceiling string, used event.SessionUsage) {
	if ceiling == "" {
		m.sessions.WithLabelValues("closed_by_admin", "none").Inc()
	} else {
		m.sessions.WithLabelValues("ceiling_reached", bounded(ceiling, knownCeilings)).Inc()
	}
	m.sessionEnded(used)
}

// Ledger registers the usage ledger's series, read from stats at each
// scrape: entries waiting for a flush, and entries lost (call records
// dropped or usage kept without its attribution because the queue was full,
// entries the database refused).
func (m *Metrics) Ledger(stats func() catalog.LedgerStats) {
	counter := func(name, help string, value func(catalog.LedgerStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(value(stats())) })
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_ledger_pending_entries",
			Help: "Ledger rows and call records waiting to be written to the catalog's database.",
		}, func() float64 { s := stats(); return float64(s.PendingRows + s.PendingCalls) }),
		counter("sluice_ledger_dropped_calls_total", "Call records dropped because the ledger's queue was full.",
			func(s catalog.LedgerStats) int64 { return s.DroppedCalls }),
		counter("sluice_ledger_folded_entries_total", "Usage entries kept without user, team and tags because the ledger's queue was full.",
			func(s catalog.LedgerStats) int64 { return s.FoldedRows }),
		counter("sluice_ledger_refused_entries_total", "Ledger rows and call records dropped because the database refused them, written alone.",
			func(s catalog.LedgerStats) int64 { return s.RefusedRows + s.RefusedCalls }),
	)
}

// knownCacheResults are the values of Event.Cache.
var knownCacheResults = []string{"hit", "miss", "bypass"}

// registerCache registers the response cache's series.
func (m *Metrics) registerCache(reg *prometheus.Registry) {
	m.cache = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_cache_requests_total",
		Help: "Calls to models with a response cache, by model and result: hit (answered from the cache), miss (from the provider), bypass (the client's Cache-Control: no-cache).",
	}, []string{"model", "result"})
	m.cacheSaved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_cache_saved_microdollars_total",
		Help: "What the calls answered from the response cache would have cost at the provider, in micro-dollars, by model.",
	}, []string{"model"})
	reg.MustRegister(m.cache, m.cacheSaved)
}

// observeCache counts a call's use of the response cache.
func (m *Metrics) observeCache(e event.Event) {
	model := m.model(e.Model)
	m.cache.WithLabelValues(model, bounded(e.Cache, knownCacheResults)).Inc()
	if e.CacheSaved > 0 {
		m.cacheSaved.WithLabelValues(model).Add(float64(e.CacheSaved))
	}
}
