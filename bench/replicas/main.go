// Command replicas is the published proof of DESIGN.md's feature row 40:
// overshoot, overhead and recovery of limits enforced by N replicas of
// `sluice serve` for M clients. The replicas share one Redis (the counters)
// and one PostgreSQL database (keys, rules, ledger); every client calls one
// replica, the clients spread round-robin over them, and all of them spend
// one workspace's limits. It runs on loopback only, every phase bounded in
// time:
//
//   - overhead: one client, the mock direct, through a replica, and through
//     a lone gateway on the embedded SQLite store;
//   - budget: a daily token budget spent to the end by every client, with
//     the Redis server restarted halfway (an outage the replicas refuse with
//     503, fail closed); served tokens are counted from the answers;
//   - rate: a requests-per-minute bucket hammered for a few seconds;
//   - concurrency: a cap on calls in flight across replicas, seen from the
//     provider's side;
//   - crash: a replica killed with kill -9 while it holds every place of a
//     cap; how long until another replica may use them again (the calls'
//     request_timeout plus expiry_slack, 3 s and 2 s here).
//
// The mock provider runs in this process, so that it can count the calls
// it has in flight. Redis is a private redis-server on a free port, with
// its append-only file synced on every write; the PostgreSQL database is
// created for the run and dropped after it.
//
//	go run -C bench ./replicas                # 3 replicas, 24 clients, about 90 s
//	go run -C bench ./replicas -replicas 5 -clients 40
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

type options struct {
	replicas, clients int
	pg                string
	phase             time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.replicas, "replicas", 3, "gateway replicas")
	flag.IntVar(&o.clients, "clients", 24, "concurrent clients, spread round-robin over the replicas")
	flag.StringVar(&o.pg, "postgres", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"PostgreSQL server where the run's catalog database is created (and dropped)")
	flag.DurationVar(&o.phase, "phase", 5*time.Second, "length of the timed phases (rate, concurrency)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(1)
	}
}

// rig is the run's processes and addresses.
type rig struct {
	o        options
	tmp, bin string
	mock     *countingMock
	mockAddr string
	redis    *proc.Child
	redisArg []string
	redisURL string
	dbURL    string
	key      string
	replicas []*proc.Child
	// addrs and admins are the replicas' client and admin addresses;
	// loneAddr and loneAdmin a lone gateway's, on the embedded SQLite
	// store, for the overhead phase.
	addrs, admins       []string
	loneAddr, loneAdmin string
	client              *http.Client
}

func run(ctx context.Context, o options) error {
	tmp, err := os.MkdirTemp("", "sluice-replicas-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	src, err := proc.SluiceRoot()
	if err != nil {
		return err
	}
	r := &rig{o: o, tmp: tmp, client: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: o.clients, MaxConnsPerHost: o.clients}}}
	proc.Logf("building sluice")
	if r.bin, err = proc.Build(ctx, src, "./cmd/sluice", filepath.Join(tmp, "sluice")); err != nil {
		return err
	}
	ports, err := proc.FreePorts(4 + 2*o.replicas)
	if err != nil {
		return err
	}
	stopMock, err := r.startMock(ports[0])
	if err != nil {
		return err
	}
	defer stopMock()
	if err := r.startRedis(ports[1]); err != nil {
		return err
	}
	defer func() { r.redis.Stop(5 * time.Second) }()
	dropDB, err := r.createDatabase(ctx)
	if err != nil {
		return err
	}
	defer dropDB()
	for i := range o.replicas {
		r.addrs = append(r.addrs, fmt.Sprintf("127.0.0.1:%d", ports[2+2*i]))
		r.admins = append(r.admins, fmt.Sprintf("127.0.0.1:%d", ports[3+2*i]))
	}
	r.loneAddr = fmt.Sprintf("127.0.0.1:%d", ports[2+2*o.replicas])
	r.loneAdmin = fmt.Sprintf("127.0.0.1:%d", ports[3+2*o.replicas])
	rep := &report{o: o}
	phases := []func(context.Context, *report) error{r.overhead, r.budget, r.rate, r.concurrency, r.crash}
	for _, phase := range phases {
		if err := phase(ctx, rep); err != nil {
			r.stopReplicas()
			return err
		}
		r.stopReplicas()
	}
	fmt.Print(rep.markdown())
	return nil
}

// countingMock is the mock provider, counting the calls it is answering.
type countingMock struct {
	inner    http.Handler
	inFlight atomic.Int64
	max      atomic.Int64
}

func (m *countingMock) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	n := m.inFlight.Add(1)
	for {
		old := m.max.Load()
		if n <= old || m.max.CompareAndSwap(old, n) {
			break
		}
	}
	defer m.inFlight.Add(-1)
	m.inner.ServeHTTP(w, req)
}

func (r *rig) startMock(port int) (func(), error) {
	r.mock = &countingMock{inner: mockprovider.New(mockprovider.Options{})}
	r.mockAddr = fmt.Sprintf("127.0.0.1:%d", port)
	ln, err := net.Listen("tcp", r.mockAddr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: r.mock, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// startRedis starts the private Redis server, its append-only file synced
// on every write under the run's directory.
func (r *rig) startRedis(port int) error {
	dir := filepath.Join(r.tmp, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	r.redisArg = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always"}
	r.redisURL = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	return r.restartRedis()
}

func (r *rig) restartRedis() error {
	c, err := proc.Start("redis", r.tmp, "redis-server", proc.ChildEnv(), r.redisArg...)
	if err != nil {
		return fmt.Errorf("redis-server (apt-get install redis-server): %w", err)
	}
	r.redis = c
	addr := strings.TrimSuffix(strings.TrimPrefix(r.redisURL, "redis://"), "/0")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_, _ = conn.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			n, _ := io.ReadAtLeast(conn, buf, 5)
			conn.Close()
			if string(buf[:n]) == "+PONG\r\n" {
				return nil
			}
		}
		if c.Exited() {
			return fmt.Errorf("redis-server exited:\n%s", c.Tail(10))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("redis-server did not answer:\n%s", c.Tail(10))
}

// createDatabase creates the run's catalog database and makes the API key
// every client uses.
func (r *rig) createDatabase(ctx context.Context) (func(), error) {
	conn, err := pgx.Connect(ctx, r.o.pg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	name := fmt.Sprintf("sluice_replicas_%d", os.Getpid())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("create database: %w", err)
	}
	drop := func() {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		conn.Close(context.Background())
	}
	cfg, err := pgx.ParseConfig(r.o.pg)
	if err != nil {
		drop()
		return nil, err
	}
	r.dbURL = fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	if err := r.writeConfig(nil, 0, 0); err != nil {
		drop()
		return nil, err
	}
	out, err := r.sluice(ctx, "keys", "create", "--config", r.configPath(), "--workspace", "proof", "--user", "load")
	if err != nil {
		drop()
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	r.key = strings.TrimSpace(lines[len(lines)-1])
	return drop, nil
}

func (r *rig) sluice(ctx context.Context, args ...string) (string, error) {
	c, err := proc.Start("cli", r.tmp, r.bin, r.env(), args...)
	if err != nil {
		return "", err
	}
	select {
	case <-ctx.Done():
		c.Stop(time.Second)
		return "", ctx.Err()
	case <-c.Done():
	}
	data, _ := os.ReadFile(filepath.Join(r.tmp, "cli.log"))
	if c.ExitCode() != 0 {
		return "", fmt.Errorf("sluice %s: %s", strings.Join(args, " "), data)
	}
	return string(data), nil
}

func (r *rig) env() []string {
	return proc.ChildEnv("SLUICE_STORE="+r.redisURL, "SLUICE_DATABASE="+r.dbURL, "SLUICE_ADMIN_TOKEN=replicas-admin-token",
		"SLUICE_RATE_PER_MINUTE=0", "SLUICE_DAILY_TOKEN_BUDGET=0", "SLUICE_MAX_IN_FLIGHT=0")
}

func (r *rig) configPath() string { return filepath.Join(r.tmp, "sluice.yaml") }

// writeConfig writes the replicas' config: the mock as provider, rules as
// given (YAML list items), requestTimeout and expirySlack when not 0.
func (r *rig) writeConfig(rules []string, requestTimeout, expirySlack time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "providers:\n  - name: mock\n    kind: mock\n    base_url: http://%s\n", r.mockAddr)
	b.WriteString("models:\n  - name: mock-small\n    provider: mock\n    price: {input: 0.15, output: 0.60}\n    max_output_tokens: 4096\n")
	if requestTimeout > 0 {
		fmt.Fprintf(&b, "request_timeout: %s\n", requestTimeout)
	}
	if expirySlack > 0 {
		fmt.Fprintf(&b, "expiry_slack: %s\n", expirySlack)
	}
	if len(rules) > 0 {
		b.WriteString("rules:\n")
		for _, rule := range rules {
			b.WriteString("  - " + rule + "\n")
		}
	}
	return os.WriteFile(r.configPath(), []byte(b.String()), 0o600)
}

// startReplicas starts every replica on the current config.
func (r *rig) startReplicas() error {
	r.replicas = r.replicas[:0]
	for i, addr := range r.addrs {
		c, err := proc.Start(fmt.Sprintf("replica-%d", i), r.tmp, r.bin, r.env(), "serve", "--config", r.configPath(),
			"--listen", addr, "--admin-listen", r.admins[i], "--data", filepath.Join(r.tmp, fmt.Sprintf("data-%d", i)))
		if err != nil {
			return err
		}
		r.replicas = append(r.replicas, c)
	}
	for i, c := range r.replicas {
		if err := proc.WaitHTTP(c, "http://"+r.addrs[i]+"/healthz", 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

func (r *rig) stopReplicas() {
	for _, c := range r.replicas {
		c.Stop(10 * time.Second)
	}
	r.replicas = r.replicas[:0]
}

// answer is one call's outcome as the client saw it.
type answer struct {
	status     int
	code       string // the error's code, for a refusal
	tokens     int64  // usage.total_tokens, for a 200
	retryAfter bool
	noRetry    bool // x-should-retry: false
	took       time.Duration
	err        error
}

// call sends one chat completion to target (an address), with prompt.
func (r *rig) call(ctx context.Context, target, prompt string) answer {
	body := fmt.Sprintf(`{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":%q}]}`, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+target+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		return answer{err: err, took: time.Since(start)}
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := answer{status: resp.StatusCode, took: time.Since(start), err: err,
		retryAfter: resp.Header.Get("Retry-After") != "", noRetry: resp.Header.Get("x-should-retry") == "false"}
	var parsed struct {
		Usage struct {
			Total int64 `json:"total_tokens"`
		} `json:"usage"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &parsed) == nil {
		a.tokens, a.code = parsed.Usage.Total, parsed.Error.Code
	}
	return a
}

// tally counts answers by status and code.
type tally struct {
	mu       sync.Mutex
	byStatus map[string]int
	tokens   int64
	ok       int
	lat      []time.Duration
	errs     []error
}

func newTally() *tally { return &tally{byStatus: map[string]int{}} }

func (t *tally) add(a answer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.err != nil {
		if len(t.errs) < 5 {
			t.errs = append(t.errs, a.err)
		}
		t.byStatus["error"]++
		return
	}
	k := strconv.Itoa(a.status)
	if a.code != "" {
		k += " " + a.code
	}
	t.byStatus[k]++
	if a.status == 200 {
		t.ok++
		t.tokens += a.tokens
		t.lat = append(t.lat, a.took)
	}
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.byStatus))
	for k := range t.byStatus {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, t.byStatus[k]))
	}
	return strings.Join(parts, ", ")
}

// hammer runs the clients against the replicas until stop returns true for
// a client (given its last answer) or ctx ends.
func (r *rig) hammer(ctx context.Context, prompt string, t *tally, stop func(replica int, a answer) bool) {
	var wg sync.WaitGroup
	for i := range r.o.clients {
		replica := i % len(r.addrs)
		target := r.addrs[replica]
		wg.Go(func() {
			for ctx.Err() == nil {
				a := r.call(ctx, target, prompt)
				if ctx.Err() != nil {
					return
				}
				t.add(a)
				if stop(replica, a) {
					return
				}
			}
		})
	}
	wg.Wait()
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// overhead: one client, the mock direct, through a replica (the shared
// Redis and PostgreSQL), and through a lone gateway on the embedded SQLite
// store (the same PostgreSQL catalog), in turn.
func (r *rig) overhead(ctx context.Context, rep *report) error {
	if err := r.writeConfig([]string{
		`{name: big_budget, kind: budget, subject: workspace, metric: tokens, limit: 100000000000, period: day}`,
		`{name: big_rate, kind: rate, subject: workspace+user, limit: 100000000, window: 1m}`,
		`{name: big_cap, kind: concurrency, subject: workspace, limit: 100000}`,
	}, 0, 0); err != nil {
		return err
	}
	if err := r.startReplicas(); err != nil {
		return err
	}
	lone, err := proc.Start("lone", r.tmp, r.bin, append(r.env(), "SLUICE_STORE=sqlite://"), "serve", "--config", r.configPath(),
		"--listen", r.loneAddr, "--admin-listen", r.loneAdmin, "--data", filepath.Join(r.tmp, "data-lone"))
	if err != nil {
		return err
	}
	defer lone.Stop(10 * time.Second)
	if err := proc.WaitHTTP(lone, "http://"+r.loneAddr+"/healthz", 30*time.Second); err != nil {
		return err
	}
	proc.Logf("overhead: one client, direct, through replica 0, through a lone gateway on SQLite")
	measure := func(target string) (time.Duration, error) {
		var lat []time.Duration
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			a := r.call(ctx, target, "hello [mock tokens=16]")
			if a.err != nil || a.status != 200 {
				return 0, fmt.Errorf("overhead call to %s: %d %s %v", target, a.status, a.code, a.err)
			}
			lat = append(lat, a.took)
		}
		return median(lat), nil
	}
	targets := []string{r.mockAddr, r.addrs[0], r.loneAddr}
	for _, target := range targets {
		if _, err := measure(target); err != nil { // warm-up
			return err
		}
	}
	p50s := make([][]time.Duration, len(targets))
	for range 3 {
		for i, target := range targets {
			d, err := measure(target)
			if err != nil {
				return err
			}
			p50s[i] = append(p50s[i], d)
		}
	}
	rep.direct, rep.through, rep.lone = median(p50s[0]), median(p50s[1]), median(p50s[2])
	return nil
}

// budget: the clients spend a daily token budget to the end; halfway, the
// Redis server is stopped and started again.
func (r *rig) budget(ctx context.Context, rep *report) error {
	const limit = 150000
	rep.budgetLimit = limit
	if err := r.writeConfig([]string{
		fmt.Sprintf(`{name: proof_budget, kind: budget, subject: workspace, metric: tokens, limit: %d, period: day}`, limit),
	}, 0, 0); err != nil {
		return err
	}
	if err := r.startReplicas(); err != nil {
		return err
	}
	proc.Logf("budget: %d clients spend %d tokens through %d replicas, Redis restarted halfway", r.o.clients, limit, r.o.replicas)
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	t := newTally()
	var outage sync.Once
	// restarted is when the new Redis process was started (Unix ns);
	// back[i] is when replica i first served a call sent after that.
	var restarted atomic.Int64
	back := make([]atomic.Int64, len(r.addrs))
	outageDone := make(chan error, 1)
	exhausted := func(i int, a answer) bool {
		if at := restarted.Load(); a.status == 200 && at != 0 {
			if sent := time.Now().Add(-a.took).UnixNano(); sent >= at {
				back[i].CompareAndSwap(0, time.Now().UnixNano())
			}
		}
		t.mu.Lock()
		half := t.tokens >= limit/2
		t.mu.Unlock()
		if half {
			outage.Do(func() {
				go func() {
					proc.Logf("budget: stopping Redis")
					r.redis.Stop(5 * time.Second)
					time.Sleep(time.Second)
					// Recovery is timed from the start of the new Redis
					// process: its own start-up (reading the append-only
					// file) counts.
					restarted.Store(time.Now().UnixNano())
					err := r.restartRedis()
					proc.Logf("budget: Redis back")
					outageDone <- err
				}()
			})
		}
		return a.status == 429 && a.code == "budget_exceeded"
	}
	r.hammer(ctx, "hello [mock tokens=16]", t, exhausted)
	select {
	case err := <-outageDone:
		if err != nil {
			return err
		}
	case <-time.After(15 * time.Second):
		return fmt.Errorf("budget: Redis was not restarted (%s)", t)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("budget: not spent within the phase's deadline: %s", t)
	}
	rep.budgetServed, rep.budgetCalls, rep.budgetAnswers = t.tokens, t.ok, t.String()
	spent := time.Now()
	var parts []string
	for i := range back {
		if b := back[i].Load(); b != 0 {
			parts = append(parts, fmt.Sprintf("replica %d after %s", i, time.Duration(b-restarted.Load()).Round(100*time.Microsecond)))
		} else {
			parts = append(parts, fmt.Sprintf("replica %d not before the budget ran out, %s after the restart",
				i, spent.Sub(time.Unix(0, restarted.Load())).Round(time.Millisecond)))
		}
	}
	rep.budgetRecovery = strings.Join(parts, "; ")
	proc.Logf("budget: served again: %s", rep.budgetRecovery)
	return nil
}

// rate: a requests-per-minute bucket, hammered for the phase's length.
func (r *rig) rate(ctx context.Context, rep *report) error {
	const perMinute = 1200
	if err := r.writeConfig([]string{
		fmt.Sprintf(`{name: proof_rate, kind: rate, subject: workspace, limit: %d, window: 1m}`, perMinute),
	}, 0, 0); err != nil {
		return err
	}
	if err := r.startReplicas(); err != nil {
		return err
	}
	proc.Logf("rate: %d clients for %s against %d requests a minute", r.o.clients, r.o.phase, perMinute)
	t := newTally()
	var refusedWithout atomic.Int64
	pctx, cancel := context.WithTimeout(ctx, r.o.phase)
	defer cancel()
	start := time.Now()
	r.hammer(pctx, "hello [mock tokens=4]", t, func(_ int, a answer) bool {
		if a.status == 429 && !a.retryAfter {
			refusedWithout.Add(1)
		}
		return false
	})
	elapsed := time.Since(start)
	rep.rateLimit, rep.rateElapsed, rep.rateAdmitted = perMinute, elapsed, t.ok
	rep.rateBound = perMinute + int(float64(perMinute)*elapsed.Seconds()/60)
	rep.rateAnswers, rep.rateNoRetryAfter = t.String(), refusedWithout.Load()
	return nil
}

// concurrency: a cap on calls in flight for the workspace, across
// replicas, with calls that take 20 ms at the provider; the provider counts
// the calls it has in flight at once.
func (r *rig) concurrency(ctx context.Context, rep *report) error {
	const limit = 6
	if err := r.writeConfig([]string{
		fmt.Sprintf(`{name: proof_cap, kind: concurrency, subject: workspace, limit: %d}`, limit),
	}, 0, 0); err != nil {
		return err
	}
	if err := r.startReplicas(); err != nil {
		return err
	}
	proc.Logf("concurrency: %d clients for %s against %d in flight", r.o.clients, r.o.phase, limit)
	r.mock.max.Store(0)
	t := newTally()
	pctx, cancel := context.WithTimeout(ctx, r.o.phase)
	defer cancel()
	r.hammer(pctx, "hello [mock tokens=4] [mock delay=20]", t, func(int, answer) bool { return false })
	rep.capLimit, rep.capMax, rep.capAdmitted, rep.capAnswers = limit, r.mock.max.Load(), t.ok, t.String()
	return nil
}

// crash: replica 0 takes every place of a cap with calls the provider
// holds, and is killed; another replica is asked every 100 ms until it
// admits a call.
func (r *rig) crash(ctx context.Context, rep *report) error {
	const limit = 4
	timeout, slack := 3*time.Second, 2*time.Second
	if err := r.writeConfig([]string{
		fmt.Sprintf(`{name: crash_cap, kind: concurrency, subject: workspace, limit: %d}`, limit),
	}, timeout, slack); err != nil {
		return err
	}
	if err := r.startReplicas(); err != nil {
		return err
	}
	proc.Logf("crash: replica 0 holds the %d places of a cap and is killed", limit)
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range limit {
		go r.call(hctx, r.addrs[0], "hold [mock delay=60000]")
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.mock.inFlight.Load() < limit {
		if time.Now().After(deadline) {
			return errors.New("crash: the held calls did not reach the provider")
		}
		time.Sleep(5 * time.Millisecond)
	}
	held := time.Now()
	r.replicas[0].Kill9()
	killed := time.Now()
	other := r.addrs[len(r.addrs)-1]
	t := newTally()
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(killed) > 2*time.Minute {
			return fmt.Errorf("crash: no admission within 2 minutes of the kill: %s", t)
		}
		a := r.call(ctx, other, "hello [mock tokens=4]")
		t.add(a)
		if a.status == 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep.crashLimit, rep.crashTimeout, rep.crashSlack = limit, timeout, slack
	rep.crashRecovery, rep.crashHeldFor = time.Since(killed), killed.Sub(held)
	rep.crashAnswers = t.String()
	cancel()
	return nil
}

// report is what the run measured.
type report struct {
	o                                  options
	direct, through, lone              time.Duration
	budgetLimit, budgetServed          int64
	budgetCalls                        int
	budgetAnswers, budgetRecovery      string
	rateLimit, rateAdmitted, rateBound int
	rateElapsed                        time.Duration
	rateAnswers                        string
	rateNoRetryAfter                   int64
	capLimit                           int
	capMax                             int64
	capAdmitted                        int
	capAnswers                         string
	crashLimit                         int
	crashTimeout, crashSlack           time.Duration
	crashRecovery, crashHeldFor        time.Duration
	crashAnswers                       string
}

func verdict(ok bool) string {
	if ok {
		return "holds"
	}
	return "**BROKEN**"
}

func (p *report) markdown() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "### %d replicas, %d clients (`go run -C bench ./replicas -replicas %d -clients %d`)\n\n",
		p.o.replicas, p.o.clients, p.o.replicas, p.o.clients)
	b.WriteString("| property | measured | bound | result |\n| --- | --- | --- | --- |\n")
	over := p.budgetServed - p.budgetLimit
	fmt.Fprintf(&b, "| budget overshoot, Redis restarted halfway | %d tokens served in %d calls (overshoot %d) | %d | %s |\n",
		p.budgetServed, p.budgetCalls, max(over, 0), p.budgetLimit, verdict(over <= 0))
	fmt.Fprintf(&b, "| budget use | %.1f%% of the budget served | | |\n", 100*float64(p.budgetServed)/float64(p.budgetLimit))
	fmt.Fprintf(&b, "| first call served after the new Redis process started (the outage answered 503, fail closed) | %s | | |\n", p.budgetRecovery)
	fmt.Fprintf(&b, "| rate overshoot | %d admitted in %s | %d (burst %d + refill) | %s |\n",
		p.rateAdmitted, p.rateElapsed.Round(time.Millisecond), p.rateBound, p.rateLimit, verdict(p.rateAdmitted <= p.rateBound))
	fmt.Fprintf(&b, "| rate refusals without Retry-After | %d | 0 | %s |\n", p.rateNoRetryAfter, verdict(p.rateNoRetryAfter == 0))
	fmt.Fprintf(&b, "| calls in flight at the provider, at most | %d (%d calls served) | %d | %s |\n",
		p.capMax, p.capAdmitted, p.capLimit, verdict(p.capMax <= int64(p.capLimit)))
	fmt.Fprintf(&b, "| places of a killed replica back in use | after %s | request_timeout %s + expiry_slack %s, after the calls' admission | |\n",
		p.crashRecovery.Round(100*time.Millisecond), p.crashTimeout, p.crashSlack)
	fmt.Fprintf(&b, "| p50 at one client: the mock direct, a lone gateway on SQLite, a replica on the shared Redis | %s, %s, %s | | |\n\n",
		p.direct.Round(time.Microsecond), p.lone.Round(time.Microsecond), p.through.Round(time.Microsecond))
	fmt.Fprintf(&b, "Answers: budget phase %s; rate phase %s; concurrency phase %s; after the kill %s.\n",
		p.budgetAnswers, p.rateAnswers, p.capAnswers, p.crashAnswers)
	return b.String()
}
