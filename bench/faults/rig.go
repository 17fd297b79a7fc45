package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// suite is what every scenario shares: the built binary, the mock
// provider, the fault proxy server, the Redis server and the run's
// PostgreSQL database (the replicas' catalog, and the counter store of the
// PostgreSQL scenarios).
type suite struct {
	tmp, bin string
	runID    string
	mock     *countingMock
	mockAddr string
	// redisAddr is the Redis server the proxies forward to, redisDB the
	// database number in its URL.
	redisAddr, redisDB string
	// dbURL is the run's database, reached directly; pgAddr its server,
	// which the PostgreSQL store's proxies forward to.
	dbURL, pgAddr string
	toxi          *toxiproxy.ApiServer
	client        *http.Client
	logf          func(format string, args ...any)
	closers       []func()
	slack         time.Duration
}

// options name the servers the suite uses: a Redis URL (its keys are the
// run's workspaces', deleted at the end) and a PostgreSQL URL whose server
// gets the run's database (created, dropped at the end).
type options struct {
	redis, postgres string
	// fault is how long each fault lasts.
	fault time.Duration
	// only, when set, runs the scenarios whose name contains it.
	only string
	// slack is added to every timing bound: CI runs this suite beside the
	// other packages' tests on a loaded machine, where a process may wait
	// for a core that long. The published table has none.
	slack time.Duration
}

func newSuite(ctx context.Context, o options, logf func(string, ...any)) (s *suite, err error) {
	s = &suite{logf: logf, slack: o.slack, runID: fmt.Sprintf("f%d%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.tmp, err = os.MkdirTemp("", "sluice-faults-"); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { os.RemoveAll(s.tmp) })
	src, err := proc.SluiceRoot()
	if err != nil {
		return nil, err
	}
	logf("building sluice")
	if s.bin, err = proc.Build(ctx, src, "./cmd/sluice", filepath.Join(s.tmp, "sluice")); err != nil {
		return nil, err
	}
	s.client = &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	if err := s.startMock(); err != nil {
		return nil, err
	}
	ru, err := url.Parse(o.redis)
	if err != nil || ru.Host == "" {
		return nil, fmt.Errorf("redis url %q: want redis://host:port/db", o.redis)
	}
	s.redisAddr, s.redisDB = ru.Host, strings.TrimPrefix(ru.Path, "/")
	s.closers = append(s.closers, func() { proc.DeleteRedisKeys(o.redis, s.runID) })
	if err := s.createDatabase(ctx, o.postgres); err != nil {
		return nil, err
	}
	// The toxics log through zerolog's global logger, a line per event.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	s.toxi = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	s.closers = append(s.closers, func() { _ = s.toxi.Collection.Clear() })
	return s, nil
}

// close undoes newSuite, last step first.
func (s *suite) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// countingMock is the mock provider, counting the calls it is answering
// for each workspace of a scenario (told apart by a marker in the prompt).
type countingMock struct {
	inner http.Handler
	mu    sync.Mutex
	now   map[string]int
	max   map[string]int
}

func (m *countingMock) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	marker := proc.Marker(body, "ws")
	m.mu.Lock()
	m.now[marker]++
	m.max[marker] = max(m.max[marker], m.now[marker])
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.now[marker]--
		m.mu.Unlock()
	}()
	m.inner.ServeHTTP(w, req)
}

// maxInFlight is the most calls of workspace ws the provider answered at
// once.
func (m *countingMock) maxInFlight(ws string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max[ws]
}

func (s *suite) startMock() error {
	s.mock = &countingMock{inner: mockprovider.New(mockprovider.Options{}), now: map[string]int{}, max: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.mockAddr = ln.Addr().String()
	srv := &http.Server{Handler: s.mock, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.closers = append(s.closers, func() { _ = srv.Close() })
	return nil
}

// createDatabase creates the run's database on the server of pgURL.
func (s *suite) createDatabase(ctx context.Context, pgURL string) error {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	name := "sluice_faults_" + s.runID
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		return fmt.Errorf("create database: %w", err)
	}
	s.closers = append(s.closers, func() {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		conn.Close(context.Background())
	})
	cfg := conn.Config()
	s.pgAddr = net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	s.dbURL = s.postgresURL(s.pgAddr)
	return nil
}

// postgresURL is the run's database at addr (the server, or a proxy).
func (s *suite) postgresURL(addr string) string {
	u, _ := url.Parse(s.dbURL)
	if u == nil || u.Scheme == "" {
		u = &url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/sluice_faults_" + s.runID, RawQuery: "sslmode=disable"}
	}
	u.Host = addr
	return u.String()
}

// newProxy starts a fault proxy on a free loopback port to upstream.
func (s *suite) newProxy(name, upstream string) (*toxiproxy.Proxy, error) {
	p := toxiproxy.NewProxy(s.toxi, s.runID+"-"+name, "127.0.0.1:0", upstream)
	if err := s.toxi.Collection.Add(p, true); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	return p, nil
}

// gateways are the replicas of one scenario, each reaching the counter
// store through its own proxy.
type gateways struct {
	dir            string
	proxies        []*toxiproxy.Proxy
	children       []*proc.Child
	addrs, admins  []string
	capKey, budKey string
	// capWS and budWS are the scenario's two workspaces: one under steady
	// load (the concurrency cap, the time to 503 and to recover), one
	// spending its budget to the end.
	capWS, budWS string
}

const adminToken = "faults-admin-token-0123456789abcdef"

// Limits of every scenario's workspaces.
const (
	concurrencyCap = 3
	tokenBudget    = 200_000
	// spendTokens is the output of one spending call: the budget lasts
	// about 25 of them.
	spendTokens = 8000
)

// startGateways starts n replicas of `sluice serve` for scenario name,
// their counter store (kind "redis" or "postgres") through a proxy each,
// their catalog the run's database, reached directly.
func (s *suite) startGateways(name, kind string, n int) (g *gateways, err error) {
	g = &gateways{dir: filepath.Join(s.tmp, name), capWS: s.runID + "-" + name + "-cap", budWS: s.runID + "-" + name + "-budget"}
	defer func() {
		if err != nil {
			s.stopGateways(g)
		}
	}()
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return nil, err
	}
	upstream := s.redisAddr
	if kind == "postgres" {
		upstream = s.pgAddr
	}
	for i := range n {
		p, err := s.newProxy(fmt.Sprintf("%s-%d", name, i), upstream)
		if err != nil {
			return nil, err
		}
		g.proxies = append(g.proxies, p)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "providers:\n  - name: mock\n    kind: mock\n    base_url: http://%s\n", s.mockAddr)
	b.WriteString("models:\n  - name: mock-small\n    provider: mock\n    price: {input: 0.15, output: 0.60}\n    max_output_tokens: 8192\n")
	b.WriteString("request_timeout: 20s\n")
	b.WriteString("rules:\n")
	fmt.Fprintf(&b, "  - {name: fault_cap, kind: concurrency, subject: workspace, limit: %d}\n", concurrencyCap)
	fmt.Fprintf(&b, "  - {name: fault_budget, kind: budget, subject: workspace, metric: tokens, limit: %d, period: day}\n", tokenBudget)
	cfg := filepath.Join(g.dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	env := func(i int) []string {
		store := "redis://" + g.proxies[i].Listen + "/" + s.redisDB
		if kind == "postgres" {
			store = s.postgresURL(g.proxies[i].Listen)
		}
		return proc.ChildEnv("SLUICE_STORE="+store, "SLUICE_DATABASE="+s.dbURL, "SLUICE_ADMIN_TOKEN="+adminToken,
			"SLUICE_RATE_PER_MINUTE=0", "SLUICE_DAILY_TOKEN_BUDGET=0", "SLUICE_MAX_IN_FLIGHT=0", "SLUICE_CONFIG="+cfg)
	}
	if g.capKey, err = s.createKey(g.dir, env(0), g.capWS); err != nil {
		return nil, err
	}
	if g.budKey, err = s.createKey(g.dir, env(0), g.budWS); err != nil {
		return nil, err
	}
	ports, err := proc.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		addr, admin := fmt.Sprintf("127.0.0.1:%d", ports[2*i]), fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		c, err := proc.Start(fmt.Sprintf("replica-%d", i), g.dir, s.bin, env(i), "serve", "--config", cfg,
			"--listen", addr, "--admin-listen", admin, "--data", filepath.Join(g.dir, fmt.Sprintf("data-%d", i)))
		if err != nil {
			return nil, err
		}
		g.children = append(g.children, c)
		g.addrs, g.admins = append(g.addrs, addr), append(g.admins, admin)
	}
	for i, c := range g.children {
		if err := proc.WaitHTTP(c, "http://"+g.addrs[i]+"/readyz", 30*time.Second); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (s *suite) createKey(dir string, env []string, ws string) (string, error) {
	c, err := proc.Start("keys-"+ws, dir, s.bin, env, "keys", "create", "--workspace", ws, "--user", "load")
	if err != nil {
		return "", err
	}
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		c.Stop(time.Second)
		return "", fmt.Errorf("keys create %s: no answer within 30s", ws)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "keys-"+ws+".log"))
	if c.ExitCode() != 0 {
		return "", fmt.Errorf("keys create %s: %s", ws, data)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

func (s *suite) stopGateways(g *gateways) {
	for _, c := range g.children {
		c.Stop(10 * time.Second)
	}
	for _, p := range g.proxies {
		_ = s.toxi.Collection.Remove(p.Name)
	}
}
