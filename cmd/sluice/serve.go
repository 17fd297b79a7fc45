package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/catalogsessions"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/llm/bpe"
	"github.com/sluicehq/sluice/store/pgstore"
	"go.opentelemetry.io/otel"
)

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c common
	c.register(fs)
	c.flag(fs, "listen", config.VarListen, "client API address (default 127.0.0.1:8080)")
	c.flag(fs, "admin-listen", config.VarAdminListen, "admin API address (default 127.0.0.1:8081)")
	c.flag(fs, "store", config.VarStore, "URL of counters and reservations (default sqlite:// under the data directory)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	log := newLogger(cfg)
	for _, w := range cfg.Warnings() {
		if cfg.IsProduction() {
			log.Warn(w)
		} else {
			log.Info(w)
		}
	}
	cat, err := openCatalog(cfg)
	if err != nil {
		return err
	}
	defer cat.Close()
	rec := ledgerInStore(cfg, cat, log)
	store, err := openStore(cfg, log, rec)
	if err != nil {
		return err
	}
	defer store.Close()
	led := ledger{cat: cat, inStore: rec != nil}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// One line per request, buffered: written out every 50 ms rather than
	// a write call per request, and flushed once the calls are drained.
	requestLines := admin.NewLineBuffer(os.Stderr, 50*time.Millisecond)
	defer requestLines.Flush()
	obs := newObservability(cfg, newLoggerTo(cfg, requestLines))
	obs.metrics.Ledger(cat.LedgerStats)
	obs.recordCall = cat.RecordCall
	tr, err := tracingFromEnv(ctx, os.Getenv)
	if err != nil {
		return err
	}
	if tr.provider != nil {
		// The SDK's own failures (an export the collector refused) go to
		// the server's log, not its default stderr logger.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
		log.Info("tracing on: spans exported over OTLP/HTTP")
	}
	if obs.events, err = eventsOf(cfg, cat, obs.metrics, log); err != nil {
		return err
	}
	go obs.events.Run(ctx)
	limiter, err := sluice.New(limiterOptions(cfg, obs.metrics.Store(store), obs.OnOverrun, led.RecordSwept))
	if err != nil {
		return err
	}
	if err := refreshOverrides(ctx, limiter, cat, cfg); err != nil {
		return err
	}
	obs.watchHeadroom(limiter, cfg)
	recordLeftovers(ctx, limiter, cat, log)
	go limiter.RunSweeper(ctx, 5*time.Second, func(err error) { log.Error("sweep", "err", err) })
	// Rules and overrides changed in the catalog, by any replica or
	// straight in the database, apply at once: the catalog says when they
	// change. A slow poll stays as a backstop.
	refresh := make(chan struct{}, 1)
	poke := func() {
		select {
		case refresh <- struct{}{}:
		default:
		}
	}
	go cat.WatchPolicy(ctx, 0, poke, watchErrors(log))
	go everyInterval(ctx, 30*time.Second, poke)
	go everyInterval(ctx, 30*time.Second, func() { obs.endExpiredSessions(ctx, cat) })
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-refresh:
			}
			if err := refreshOverrides(ctx, limiter, cat, cfg); err != nil {
				log.Error("reload overrides", "err", err)
			}
		}
	}()

	// Both listeners are bound before the built-in mock provider takes a
	// loopback port of its own, so that it never takes either one's (a
	// port just given back is as free as any), and a taken address fails
	// the start before anything else runs.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return err
	}
	defer adminLn.Close()
	cfg.Listen, cfg.AdminListen = boundAddr(cfg.Listen, ln), boundAddr(cfg.AdminListen, adminLn)
	providers, err := providersOf(ctx, cfg, log)
	if err != nil {
		return err
	}
	keys := newKeyStore(cat, cfg)
	keys.settled.start(ctx, cat, keys.config, log)
	auth, err := authenticatorOf(ctx, cfg, keys, log)
	if err != nil {
		return err
	}
	models, err := modelsOf(cfg)
	if err != nil {
		return err
	}
	g, err := gateway.New(gateway.Options{
		Limiter:          limiter,
		Keys:             auth,
		Usage:            led,
		Models:           models,
		TenantModels:     tenantModelsOf(cfg),
		Providers:        providers,
		MaxBodyBytes:     int(cfg.MaxBodyBytes),
		MaxConns:         maxConnections(cfg.MaxConnections),
		MaxConnsPerIP:    cfg.MaxConnectionsPerIP,
		HeaderTimeout:    cfg.HeaderTimeout,
		CatalogTimeout:   cfg.CatalogTimeout,
		TerminalStatus:   cfg.TerminalStatus,
		BatchMaxWait:     cfg.MaxWait,
		TierMaxWait:      tierMaxWaits(cfg),
		TierClass:        tierClasses(cfg),
		RequestTimeout:   cfg.RequestTimeout,
		UpstreamRetries:  *cfg.UpstreamRetries,
		TrustedProxies:   cfg.TrustedPrefixes(),
		PreAuthPerMinute: cfg.PreAuthPerMinute,
		Logger:           log,
		Observer:         obs.Observe,
		Sessions:         sessionsOf(cat, keys.config),
		Dependencies:     dependenciesOf(store, cat),
		TracerProvider:   tr.provider,
		Propagator:       tr.propagator,
		OnDependency:     obs.events.Dependency,
		// The response cache (cmd/sluice/cache.go).
		Cache:              cacheOf(cfg, store, log),
		CacheMaxEntryBytes: int(cfg.Cache.MaxEntryBytes),

		// Live connections (GET /v1/realtime), from the config's live.
		LiveMaxDuration:   cfg.Live.MaxDuration,
		LiveMaxFrameBytes: int(cfg.Live.MaxFrameBytes),
		LiveWriteTimeout:  cfg.Live.WriteTimeout,
		LiveSecretKey:     cfg.Live.SecretKey(os.LookupEnv),
	})
	if err != nil {
		return err
	}
	go g.CheckDependencies(ctx, 2*time.Second, time.Second)
	obs.watchCircuits(g)
	obs.watchCache(cfg, g)
	obs.metrics.LiveConnections(g.LiveConnections)
	srv := g.Server()
	go func() {
		if err := srv.Serve(g.Listener(ln)); err != nil {
			log.Error("client listener", "err", err)
			stop()
		}
	}()
	admin, token, err := startAdmin(ctx, adminLn, cfg, &c, cat, limiter, obs, log)
	if err != nil {
		return err
	}
	if cfg.IsProduction() {
		log.Info("serving", "listen", cfg.Listen, "admin_listen", cfg.AdminListen, "config", configName(c.path()), "data_dir", absPath(cfg.DataDir))
	} else {
		printBanner(os.Stdout, cfg, &c, token, limiter.Policy().Rules)
	}

	<-ctx.Done()
	log.Info("shutting down: finishing in-flight calls")
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.ShutdownWithContext(drain)
	if err := g.Drain(drain); err != nil {
		// Streams longer than the drain are cut, and settled with what
		// they streamed, rather than left for the next start's sweep to
		// charge whole.
		log.Warn("shutdown deadline passed with calls in flight; cutting the streams still open", "err", err)
		g.CutStreams()
		settle, cancelSettle := context.WithTimeout(context.Background(), 5*time.Second)
		if err := g.Drain(settle); err != nil {
			log.Warn("calls still unsettled at exit; the next start's sweep charges their reservations", "err", err)
		}
		cancelSettle()
	}
	// The spans still batched go out before the process ends.
	if err := tr.shutdown(drain); err != nil {
		log.Warn("tracing: spans not exported at shutdown", "err", err)
	}
	_ = requestLines.Flush()
	if admin != nil {
		_ = admin.Shutdown(drain)
	}
	return nil
}

// newLogger is the server's logger, for everything but request lines:
// admin.Redact masks anything shaped like a secret that an error might
// carry (a key, a token, a password in a store URL).
func newLogger(cfg *config.Config) *slog.Logger {
	return admin.NewLogger(os.Stderr, cfg.IsProduction())
}

// boundAddr is addr, or, when addr leaves the port to the system (port 0),
// the address ln was given: the banner and the log name the port to call.
func boundAddr(addr string, ln net.Listener) string {
	if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		return ln.Addr().String()
	}
	return addr
}

// newLoggerTo is the request lines' logger. Those lines are built from a
// gateway.Event, which holds no identity and no secret, so they are not
// run through Redact's patterns on the hot path.
func newLoggerTo(cfg *config.Config, w io.Writer) *slog.Logger {
	if cfg.IsProduction() {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

func everyInterval(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// providersOf returns the gateway's providers, starting the built-in mock
// on a loopback port when a mock provider has no base URL.
func providersOf(ctx context.Context, cfg *config.Config, log *slog.Logger) ([]gateway.Provider, error) {
	var out []gateway.Provider
	for _, p := range cfg.Providers {
		gp := gateway.Provider{Name: p.Name, Kind: string(p.Kind), BaseURL: p.BaseURL, APIKey: p.APIKey(os.LookupEnv), Pace: p.Pace,
			Organization: p.Organization, Project: p.Project, OutputCapField: p.OutputCapField, APIVersion: p.APIVersion,
			CircuitFailures: p.Circuit.Failures, CircuitCooldown: p.Circuit.Cooldown,
			RequestsPerMinute: p.RequestsPerMinute, TokensPerMinute: p.TokensPerMinute}
		if p.Kind == config.KindMock && p.BaseURL == "" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			srv := &http.Server{Handler: mockprovider.New(mockprovider.Options{}), ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			go func() {
				<-ctx.Done()
				_ = srv.Close()
			}()
			gp.BaseURL = "http://" + ln.Addr().String()
			log.Info("built-in mock provider", "provider", p.Name, "url", gp.BaseURL)
		}
		out = append(out, gp)
	}
	return out, nil
}

func modelsOf(cfg *config.Config) ([]gateway.Model, error) {
	var out []gateway.Model
	for _, m := range cfg.Models {
		gm := gateway.Model{Name: m.Name, Provider: m.Provider, UpstreamName: m.UpstreamName,
			Price: m.SluicePrice(), MaxOutputTokens: m.MaxOutputTokens, ContextWindow: m.ContextWindow,
			Aliases: m.Aliases, Fallbacks: m.Fallbacks}
		for _, d := range m.Deployments {
			gm.Deployments = append(gm.Deployments, gateway.Deployment{Provider: d.Provider, UpstreamName: d.UpstreamName, Weight: d.Weight})
		}
		if m.Cache != nil {
			gm.CacheTTL = m.Cache.TTL
		}
		if name := tokenizerOf(cfg, &m); name != "" && m.ContextWindow > 0 {
			enc, err := bpe.Get(name)
			if err != nil {
				return nil, fmt.Errorf("model %s: %w", m.Name, err)
			}
			gm.Tokenizer = enc
		}
		out = append(out, gm)
	}
	return out, nil
}

// tokenizerOf is the encoding model m's prompts are counted with (see
// config.Model.Tokenizer); "" for none.
func tokenizerOf(cfg *config.Config, m *config.Model) string {
	switch m.Tokenizer {
	case config.TokenizerNone:
		return ""
	case "":
		p, ok := cfg.Provider(m.Provider)
		if !ok || (p.Kind != config.KindOpenAI && p.Kind != config.KindAzure) {
			return ""
		}
		upstream := m.UpstreamName
		if upstream == "" {
			upstream = m.Name
		}
		return bpe.ForModel(upstream)
	}
	return m.Tokenizer
}

func tenantModelsOf(cfg *config.Config) []gateway.TenantModel {
	var out []gateway.TenantModel
	for _, t := range cfg.TenantModels {
		tm := gateway.TenantModel{Name: t.Name, Default: t.Default}
		for _, r := range t.Routes {
			tm.Routes = append(tm.Routes, gateway.TenantRoute{Org: r.Org, Workspace: r.Workspace, Tier: r.Tier, Model: r.Model})
		}
		out = append(out, tm)
	}
	return out
}

// sessionsOf serves sessions from the catalog, on the terms of the
// configuration in force (it follows reloads; the cap of open sessions is
// the one serve started with).
func sessionsOf(cat *catalog.Catalog, live func() *config.Config) *gateway.Sessions {
	return &gateway.Sessions{Store: catalogsessions.Store{Catalog: cat}, MaxOpenPerUser: live().Sessions.MaxOpenPerUser, Terms: func(p gateway.Principal) gateway.SessionTerms {
		t := live().SessionTerms(p.Tier)
		return gateway.SessionTerms{Model: t.Model, MaxDuration: t.MaxDuration, MaxTurns: t.MaxTurns, MaxTokens: t.MaxTokens,
			MaxCost: t.MaxCost, MaxContext: t.MaxContext}
	}}
}

// keyStore adapts the catalog to the gateway's Authenticator. It applies
// the configuration's tier promotions: the account's age is its key's, its
// usage what the ledger holds for the key.
type keyStore struct {
	cat *catalog.Catalog
	// config returns the configuration in force (it follows reloads).
	config func() *config.Config
	now    func() time.Time
	// settled is every key's usage, for promotions by usage; nil counts
	// none.
	settled *settledByKey
}

var _ gateway.CachedAuthenticator = keyStore{}

func newKeyStore(cat *catalog.Catalog, started *config.Config) keyStore {
	return keyStore{cat: cat, now: time.Now, settled: &settledByKey{}, config: func() *config.Config {
		if c := liveConfig.Load(); c != nil {
			return c
		}
		return started
	}}
}

// settledRefresh is how often the keys' settled usage is read from the
// ledger for promotions by usage: a key is promoted within this much of
// its usage reaching the ledger.
const settledRefresh = 30 * time.Second

// settledByKey is every key's usage over its life, read from the ledger
// in one grouped query every settledRefresh, never on a request's path. It
// is safe for concurrent use.
type settledByKey struct {
	totals atomic.Pointer[map[string]config.Settled]
}

// of returns what key id has settled, as of the last read (none before).
func (s *settledByKey) of(id string) config.Settled {
	if s == nil {
		return config.Settled{}
	}
	if m := s.totals.Load(); m != nil {
		return (*m)[id]
	}
	return config.Settled{}
}

// refresh reads the ledger's totals per key: settled calls and the sweep's
// charges, what the budgets were charged.
func (s *settledByKey) refresh(ctx context.Context, cat *catalog.Catalog) error {
	rows, err := cat.Usage(ctx, catalog.UsageQuery{GroupBy: []string{"key"}})
	if err != nil {
		return fmt.Errorf("tier promotions: read the keys' usage: %w", err)
	}
	m := make(map[string]config.Settled, len(rows))
	for _, r := range rows {
		if r.Key != "" {
			m[r.Key] = config.Settled{Tokens: r.Tokens, Cost: r.CostMicros}
		}
	}
	s.totals.Store(&m)
	return nil
}

// start refreshes s now, before the first request, then every
// settledRefresh until ctx ends, while a tier of the configuration in
// force is promoted by usage. A failed read keeps the last totals: a key
// is not demoted because the catalog did not answer.
func (s *settledByKey) start(ctx context.Context, cat *catalog.Catalog, live func() *config.Config, log *slog.Logger) {
	read := func() {
		if live().PromotesByUsage() {
			if err := s.refresh(ctx, cat); err != nil {
				log.Warn("tier promotions by usage use the last totals read", "err", err)
			}
		}
	}
	read()
	go everyInterval(ctx, settledRefresh, read)
}

func (k keyStore) Authenticate(ctx context.Context, secret string) (gateway.Principal, error) {
	key, err := k.cat.Authenticate(ctx, secret)
	return k.principal(key, err)
}

// AuthenticateCached answers from the catalog's key cache, when it can.
func (k keyStore) AuthenticateCached(secret string) (gateway.Principal, bool, error) {
	key, ok, err := k.cat.AuthenticateCached(secret)
	if !ok {
		return gateway.Principal{}, false, nil
	}
	p, err := k.principal(key, err)
	return p, true, err
}

// principal is the gateway's principal for the catalog's answer about a
// key: a refused key is gateway.ErrBadKey.
func (k keyStore) principal(key catalog.Key, err error) (gateway.Principal, error) {
	switch {
	case errors.Is(err, catalog.ErrUnknownKey), errors.Is(err, catalog.ErrRevokedKey), errors.Is(err, catalog.ErrExpiredKey):
		return gateway.Principal{}, gateway.ErrBadKey
	case err != nil:
		return gateway.Principal{}, err
	}
	tier := key.Tier
	if tier != "" && !key.CreatedAt.IsZero() {
		tier = k.config().PromotedTier(tier, k.now().Sub(key.CreatedAt), k.settled.of(key.ID))
	}
	return gateway.Principal{KeyID: key.ID, Org: key.Org, Workspace: key.Workspace, Team: key.Team, User: key.User,
		Tier: tier, AllowedModels: key.AllowedModels, Assert: key.Assert, AssertWorkspaces: key.AssertWorkspaces,
		Class: key.Class, MaxWait: time.Duration(key.MaxWait), Turns: key.Turns || k.config().TierTurns(tier), NoCache: key.NoCache}, nil
}

// limiterOptions are the Limiter's options from cfg, over store. Its
// reservations are renewed by the sweeper serve runs (lease_timeout).
func limiterOptions(cfg *config.Config, store sluice.Store, onOverrun func(sluice.Overrun), onSwept func(sluice.SweptReservation)) sluice.Options {
	return sluice.Options{Store: store, Rules: cfg.EffectiveRules(), Tiers: cfg.SluiceTiers(),
		DefaultTimeout: cfg.RequestTimeout, ExpirySlack: cfg.ExpirySlack, LeaseTimeout: cfg.LeaseTimeout,
		RetryAfterBuffer: cfg.RetryAfterBuffer, OnOverrun: onOverrun, OnSwept: onSwept}
}

// recordLeftovers writes to the ledger at once, not at the sweeper's first
// tick, what the store charged at its start for the reservations a previous
// process left open; the second sweep, after the ledger's write, tells the
// store (sqlitestore) that they are recorded, so that a crash loop loses
// none of them and records them twice only if killed between the two.
func recordLeftovers(ctx context.Context, limiter *sluice.Limiter, cat *catalog.Catalog, log *slog.Logger) {
	if _, err := limiter.Sweep(ctx); err != nil {
		log.Error("sweep", "err", err)
		return
	}
	if err := cat.Flush(ctx); err != nil {
		log.Error("sweep: ledger not written; the store keeps what it charged at start", "err", err)
		return
	}
	if _, err := limiter.Sweep(ctx); err != nil {
		log.Error("sweep", "err", err)
	}
}

// dependenciesOf is what /readyz checks: the counter store when it can be
// pinged (Redis, PostgreSQL; the embedded stores live in the process), the
// catalog, and the ledger's queue (down while full: records are being lost).
func dependenciesOf(store sluice.Store, cat *catalog.Catalog) []gateway.Dependency {
	deps := []gateway.Dependency{{Name: "catalog", Check: cat.Ping}, {Name: "ledger", Check: cat.LedgerBacklog}}
	if p, ok := store.(interface{ Ping(context.Context) error }); ok {
		deps = append(deps, gateway.Dependency{Name: "store", Check: p.Ping})
	}
	return deps
}

// ledger adapts the catalog to the gateway's SettlementRecorder. With
// inStore, the counter store writes each call's record in its settlement's
// commit (ledgerInStore); otherwise the catalog journals it after the
// settlement.
type ledger struct {
	cat     *catalog.Catalog
	inStore bool
}

func (l ledger) RecordUsage(u gateway.UsageRecord) {
	r := ledgerRecordOf(u)
	l.cat.RecordUsage(r.Usage)
	l.cat.RecordCall(r.Call)
}

// Attach gives u to the counter store with the settlement when it writes
// the ledger.
func (l ledger) Attach(ctx context.Context, u gateway.UsageRecord) (context.Context, func() bool) {
	if !l.inStore {
		return ctx, nil
	}
	return pgstore.WithRecord(ctx, ledgerRecordOf(u))
}

// ledgerRecordOf is what the ledger keeps of a settled call.
func ledgerRecordOf(u gateway.UsageRecord) catalog.LedgerRecord {
	outcome := catalog.OutcomeReported
	switch {
	case u.CacheHit:
		outcome = catalog.OutcomeCacheHit
	case u.Estimated:
		outcome = catalog.OutcomeEstimated
	}
	return catalog.LedgerRecord{
		Usage: catalog.UsageEntry{Org: u.Org, Workspace: u.Workspace, Route: u.Route, Model: u.Model, At: u.At, Requests: 1,
			KeyID: u.KeyID, User: u.User, Team: u.Team, Tags: u.Tags, CacheHit: u.CacheHit, CacheSavedMicros: u.CacheSaved,
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens, CostMicros: u.Cost},
		Call: catalog.CallRecord{At: u.At, RequestID: u.RequestID, Org: u.Org, Workspace: u.Workspace, KeyID: u.KeyID, User: u.User,
			Route: u.Route, Model: u.Model, Provider: u.Provider, Outcome: outcome,
			ReservedTokens: u.Reserved.InputTokens + u.Reserved.OutputTokens, ReservedCost: u.Reserved.Cost,
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens, CostMicros: u.Cost,
			CacheSavedMicros: u.CacheSaved, SessionID: u.SessionID, ConnectionID: u.ConnectionID,
			AudioInputTokens: u.AudioInputTokens, AudioOutputTokens: u.AudioOutputTokens},
	}
}

// RecordSwept records in the ledger, marked as swept, what the sweep
// charged a reservation that was never settled (a crash, a settlement that
// never reached the store): the tokens and cost its budgets were charged,
// attributed to what its counters' subjects name.
func (l ledger) RecordSwept(s sluice.SweptReservation) {
	if !s.Known {
		return
	}
	id := &s.Identity
	tokens, cost := s.Charged[sluice.MetricTokens], s.Charged[sluice.MetricCost]
	l.cat.RecordUsage(catalog.UsageEntry{Org: id.Org, Workspace: id.Workspace, Route: id.Route, Model: id.Model,
		KeyID: id.Key, User: id.User, Team: id.Team, Tags: id.Tags, Swept: true, Requests: 1, Tokens: tokens, CostMicros: cost})
	l.cat.RecordCall(catalog.CallRecord{Org: id.Org, Workspace: id.Workspace, KeyID: id.Key, User: id.User, Route: id.Route, Model: id.Model,
		Outcome: catalog.OutcomeSwept, ReservedTokens: tokens, ReservedCost: cost})
}

// minProductionAdminToken is the shortest SLUICE_ADMIN_TOKEN production
// accepts: 32 bytes, as many as a generated token's random part.
const minProductionAdminToken = 32

// adminToken returns the admin token: SLUICE_ADMIN_TOKEN (in production at
// least minProductionAdminToken bytes), or in development on a loopback
// address a generated one.
func adminToken(cfg *config.Config) (string, bool, error) {
	host, _, err := net.SplitHostPort(cfg.AdminListen)
	if err != nil {
		return "", false, err
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || ip != nil && ip.IsLoopback()
	if t := os.Getenv("SLUICE_ADMIN_TOKEN"); t != "" {
		if len(t) < minProductionAdminToken && cfg.IsProduction() {
			return "", false, fmt.Errorf("SLUICE_ADMIN_TOKEN is %d bytes; production needs at least %d (for example: openssl rand -hex 32)", len(t), minProductionAdminToken)
		}
		// Anyone who can reach a listener beyond loopback may guess a short
		// token, whatever the mode.
		if len(t) < minProductionAdminToken && !loopback {
			return "", false, fmt.Errorf("SLUICE_ADMIN_TOKEN is %d bytes; an admin listener beyond loopback (%s) needs at least %d (for example: openssl rand -hex 32)",
				len(t), cfg.AdminListen, minProductionAdminToken)
		}
		return t, false, nil
	}
	if cfg.IsProduction() || !loopback {
		return "", false, fmt.Errorf("admin listener %s needs SLUICE_ADMIN_TOKEN (a token is generated only in development on loopback)", cfg.AdminListen)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", false, err
	}
	return "sluice-admin-" + hex.EncodeToString(b), true, nil
}

// printBanner tells a developer where the server listens, which config
// and data directory it runs with, the built-in rules in force (rules),
// and how to make a first call, with the flags serve was given (c) so
// that the key is made where the server reads it. Production logs one
// line instead.
func printBanner(out io.Writer, cfg *config.Config, c *common, generatedToken string, rules []sluice.Rule) {
	fmt.Fprintf(out, `sluice: client API on http://%s   admin API on http://%s
sluice: config %s; data directory %s
`, cfg.Listen, cfg.AdminListen, configName(c.path()), absPath(cfg.DataDir))
	if generatedToken != "" {
		fmt.Fprintf(out, "sluice: development admin token (set SLUICE_ADMIN_TOKEN to choose one): %s\n", generatedToken)
	}
	fmt.Fprintln(out)
	printBuiltIns(out, rules)
	fmt.Fprintf(out, `First call:
  go run ./cmd/sluice keys create%s --workspace demo --user me      # prints the key on its last line
  curl http://%s/v1/chat/completions -H "Authorization: Bearer $KEY" \
    -H 'Content-Type: application/json' \
    -d '{"model":"mock-small","messages":[{"role":"user","content":"hello"}],"max_tokens":16}'
`, commonFlags(c), cfg.Listen)
}

// tierMaxWaits returns the tiers' own max_wait, by tier name.
func tierMaxWaits(cfg *config.Config) map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, t := range cfg.Tiers {
		if t.MaxWait > 0 {
			m[t.Name] = t.MaxWait
		}
	}
	return m
}

// tierClasses returns the tiers' priority classes, by tier name.
func tierClasses(cfg *config.Config) map[string]string {
	m := map[string]string{}
	for _, t := range cfg.Tiers {
		if t.Class != "" {
			m[t.Name] = t.Class
		}
	}
	return m
}

// watchErrors logs the first failure of the catalog's change watch in a
// row, not each retry of it (the readiness check reports the catalog
// down).
func watchErrors(log *slog.Logger) func(error) {
	var last time.Time
	return func(err error) {
		if time.Since(last) > time.Minute {
			log.Warn("watching the catalog for rule and override changes failed; retrying every second", "err", err)
		}
		last = time.Now()
	}
}
