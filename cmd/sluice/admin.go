package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/netutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/event"
	"github.com/sluicehq/sluice/internal/events"
)

// observability is the gateway's metrics, request log and events.
type observability struct {
	metrics *admin.Metrics
	log     *slog.Logger
	// events is set by serve once the catalog is open.
	events *events.Events
	// recordCall, set by serve once the catalog is open, keeps the refused
	// calls of known keys (admin.RefusedCall) beside the settled ones.
	recordCall func(catalog.CallRecord)
	// circuits, set by serve once the gateway is made, lists its circuits.
	circuits func() []admin.Circuit
	// live lists the gateway's live connections for the console.
	live func() []admin.LiveConnection
	// purgeCache, set by serve once the gateway is made, purges its
	// response cache; nil when it has none (watchCache).
	purgeCache admin.PurgeCacheFunc
}

// newObservability registers the metrics for cfg's models.
func newObservability(cfg *config.Config, log *slog.Logger) *observability {
	models := map[string]string{}
	for _, m := range cfg.Models {
		models[m.Name] = m.Name
		for _, a := range m.Aliases {
			models[a] = m.Name
		}
	}
	var providers []string
	for _, p := range cfg.Providers {
		providers = append(providers, p.Name)
	}
	return &observability{metrics: admin.NewMetrics(admin.MetricsOptions{Models: models, Providers: providers}), log: log}
}

// watchHeadroom exports the headroom of the deployment's rules and of the
// workspaces cfg lists under metrics.headroom_workspaces.
func (o *observability) watchHeadroom(l *sluice.Limiter, cfg *config.Config) {
	var workspaces []admin.HeadroomWorkspace
	for _, w := range cfg.HeadroomWorkspaces() {
		workspaces = append(workspaces, admin.HeadroomWorkspace{Org: w.Org, Workspace: w.Workspace})
	}
	o.metrics.WatchHeadroom(l, workspaces)
}

// watchCircuits exports the gateway's circuits as sluice_circuit_open,
// and keeps them for GET /admin/v1/circuits.
func (o *observability) watchCircuits(g *gateway.Gateway) {
	o.circuits = func() []admin.Circuit {
		var out []admin.Circuit
		for _, c := range g.Circuits() {
			out = append(out, admin.Circuit{Provider: c.Provider, Model: c.Model, Open: c.Open, RetryAt: c.RetryAt})
		}
		return out
	}
	o.metrics.WatchCircuits(o.circuits)
	o.live = func() []admin.LiveConnection {
		var out []admin.LiveConnection
		for _, l := range g.LiveList() {
			out = append(out, admin.LiveConnection(l))
		}
		return out
	}
}

// Observe counts a finished request and logs one line for it; it is the
// gateway's Observer.
func (o *observability) Observe(e gateway.Event) {
	o.metrics.Observe(e)
	admin.LogRequest(o.log, e)
	if o.events != nil {
		o.events.Observe(e)
	}
	if r, ok := admin.RefusedCall(e); ok && o.recordCall != nil {
		o.recordCall(r)
	}
}

// endExpiredSessions observes the sessions whose wall clock passed with no
// close and no ceiling: they ended, and what they used counts in the
// session metrics as that of every other ended session.
func (o *observability) endExpiredSessions(ctx context.Context, cat *catalog.Catalog) {
	ended, err := cat.EndExpiredSessions(ctx)
	if err != nil {
		o.log.Error("end expired sessions", "err", err)
		return
	}
	for _, s := range ended {
		o.metrics.SessionEnded("wall_clock", event.SessionUsage{Turns: s.Turns, Tokens: s.Tokens, Cost: s.Cost})
	}
}

// OnOverrun counts, logs and audits a settlement above its reservation; it
// is the limiter's OnOverrun.
func (o *observability) OnOverrun(ov sluice.Overrun) {
	o.metrics.OnOverrun(ov)
	if o.events != nil {
		o.events.Overrun(ov)
	}
}

// liveConfig is the configuration in force: the one serve started with
// until a reload swaps in another. Only the policy (rules and tiers)
// follows a reload; listeners, models and providers need a restart.
var liveConfig atomic.Pointer[config.Config]

// Policy rebuilds read the catalog with no lock held (a stalled database
// holds up only the rebuild that waits on it); each takes a number when it
// starts, and under policyMu a rebuild applies its policy only if no
// rebuild that started later applied one first, so that an older rebuild
// never overwrites a newer one.
var (
	policyMu      sync.Mutex
	policyStarted atomic.Int64
	policyApplied int64 // under policyMu
)

// applyPolicy applies p, built by the rebuild numbered seq, unless a later
// one was applied. A reload (cfg not nil) is applied whatever came first,
// with its configuration: a rebuild that overtook it read the old one.
func applyPolicy(l *sluice.Limiter, seq int64, p sluice.Policy, cfg *config.Config) error {
	policyMu.Lock()
	defer policyMu.Unlock()
	if seq < policyApplied && cfg == nil {
		return nil
	}
	if err := l.SetPolicy(p); err != nil {
		return err
	}
	policyApplied = max(policyApplied, seq)
	if cfg != nil {
		liveConfig.Store(cfg)
	}
	return nil
}

// refreshOverrides swaps in the policy built from the live configuration,
// the rules stored in the catalog and the stored overrides. cfg is used
// until a reload replaces it.
func refreshOverrides(ctx context.Context, l *sluice.Limiter, cat *catalog.Catalog, cfg *config.Config) error {
	liveConfig.CompareAndSwap(nil, cfg)
	return rebuildPolicy(ctx, l, cat, liveConfig.Load())
}

func rebuildPolicy(ctx context.Context, l *sluice.Limiter, cat *catalog.Catalog, cfg *config.Config) error {
	seq := policyStarted.Add(1)
	p, _, err := admin.LoadPolicy(ctx, cat, cfg.Layers(), cfg.SluiceTiers())
	if err != nil {
		return err
	}
	return applyPolicy(l, seq, p, nil)
}

// reloader re-reads the configuration named by the serve command's flags.
type reloader struct {
	flags   *common
	cat     *catalog.Catalog
	limiter *sluice.Limiter
	log     *slog.Logger
}

// reload reads and validates the config file again and swaps in its
// policy atomically. A bad file is refused and the running policy kept.
func (r *reloader) reload() error {
	cfg, err := r.flags.load()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seq := policyStarted.Add(1)
	p, _, err := admin.LoadPolicy(ctx, r.cat, cfg.Layers(), cfg.SluiceTiers())
	if err == nil {
		err = applyPolicy(r.limiter, seq, p, cfg)
	}
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		r.log.Warn(w)
	}
	r.log.Info("configuration reloaded", "rules", len(p.Rules), "overrides", len(p.Overrides))
	return nil
}

// startAdmin serves the admin API, /metrics and the console on ln (bound
// to cfg.AdminListen), and reloads the configuration on SIGHUP. It returns the
// generated admin token when it made one.
func startAdmin(ctx context.Context, ln net.Listener, cfg *config.Config, flags *common, cat *catalog.Catalog, limiter *sluice.Limiter,
	obs *observability, log *slog.Logger) (*http.Server, string, error) {
	token, generated, err := adminToken(cfg)
	if err != nil {
		return nil, "", err
	}
	r := &reloader{flags: flags, cat: cat, limiter: limiter, log: log}
	h, err := admin.New(admin.Options{
		Catalog: cat, Limiter: limiter, AdminToken: token, Metrics: obs.metrics, Logger: log, Timeout: cfg.AdminTimeout, Circuits: obs.circuits, Live: obs.live,
		OnChange: func() {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := refreshOverrides(rctx, limiter, cat, cfg); err != nil {
				log.Error("apply an admin change", "err", err)
			}
		},
		Reload:     r.reload,
		CheckKey:   checkKeyLive(cfg),
		PurgeCache: obs.purgeCache,
	})
	if err != nil {
		return nil, "", err
	}
	srv := serveAdmin(ln, h, defaultAdminLimits, log)
	go reloadOnHangup(ctx, r, log)
	if !generated {
		token = ""
	}
	return srv, token, nil
}

// adminLimits bound the admin listener's connections, so that clients
// which open connections and leave them idle (no authentication is needed
// to open one) cannot take the process's descriptors.
type adminLimits struct {
	// header, read and write bound reading a request's headers, reading a
	// whole request, and writing its answer; idle bounds the wait for the
	// next request on a kept-alive connection.
	header, read, write, idle time.Duration
	// maxConns caps the connections served at once; more wait to be
	// accepted. It stays well inside the 256 descriptors the client
	// listener's default cap keeps back (config.Config.MaxConnections).
	maxConns int
}

// defaultAdminLimits suit an operator's console, the CLI and a Prometheus
// scrape: every admin answer is small and bounded by the catalog's timeout.
var defaultAdminLimits = adminLimits{header: 10 * time.Second, read: 30 * time.Second, write: time.Minute, idle: time.Minute, maxConns: 64}

// serveAdmin serves h on ln within lim until the returned server is shut
// down.
func serveAdmin(ln net.Listener, h http.Handler, lim adminLimits, log *slog.Logger) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.header, ReadTimeout: lim.read, WriteTimeout: lim.write, IdleTimeout: lim.idle}
	go func() {
		if err := srv.Serve(netutil.LimitListener(ln, lim.maxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener", "err", err)
		}
	}()
	return srv
}

// checkKeyLive vets a new key against the configuration in force: started
// until a reload swaps in another.
func checkKeyLive(started *config.Config) func(tier string, models []string) error {
	return func(tier string, models []string) error {
		if live := liveConfig.Load(); live != nil {
			return live.CheckKey(tier, models)
		}
		return started.CheckKey(tier, models)
	}
}

// reloadOnHangup reloads the configuration on every SIGHUP until ctx ends.
func reloadOnHangup(ctx context.Context, r *reloader, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			err := r.reload()
			if err != nil {
				log.Error("SIGHUP: configuration not reloaded; the running one is kept", "err", err)
			}
			// A reload by signal is audited like one through the API.
			entry := catalog.AuditEntry{Actor: "signal:SIGHUP", Action: "config.reload", After: map[string]any{"ok": true}}
			if err != nil {
				entry.After, entry.Denied = map[string]any{"ok": false, "error": err.Error()}, true
			}
			if aerr := r.cat.Audit(ctx, entry); aerr != nil {
				log.Error("audit a SIGHUP reload", "err", aerr)
			}
		}
	}
}

// keyRequest is the body of POST /admin/v1/keys, as "sluice keys create
// --admin-url" sends it.
type keyRequest struct {
	Org           string    `json:"org,omitempty"`
	Workspace     string    `json:"workspace"`
	Team          string    `json:"team,omitempty"`
	User          string    `json:"user"`
	Tier          string    `json:"tier,omitempty"`
	Name          string    `json:"name,omitempty"`
	AllowedModels []string  `json:"allowed_models,omitempty"`
	ExpiresAt     time.Time `json:"expires_at,omitzero"`
	// Assert and AssertWorkspaces make a service key (catalog.Key).
	Assert           []string `json:"assert,omitempty"`
	AssertWorkspaces []string `json:"assert_workspaces,omitempty"`
	// Limits are the key's own limits (keyLimitFlags).
	Limits map[string]any `json:"limits,omitempty"`
	// Class is the key's priority class; MaxWait its bound on waiting, a
	// duration string.
	Class   string `json:"class,omitempty"`
	MaxWait string `json:"max_wait,omitempty"`
	// Turns lets the key group its calls into turns (X-Sluice-Turn).
	Turns bool `json:"turns,omitempty"`
	// NoCache keeps the key's calls out of the response cache.
	NoCache bool `json:"no_cache,omitempty"`
}
