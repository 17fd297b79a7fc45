package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// class is one priority class of the run's cap, as configured.
type class struct {
	name          string
	weight, floor int64
	// share is the class's configured part of the cap under contention.
	share float64
}

// capacity is the run's concurrency cap; the floors add up to it, so that
// each class's share is its floor.
const capacity = 12

var classes = []class{
	{name: "interactive", weight: 3, floor: 6, share: 6.0 / capacity},
	{name: "standard", weight: 2, floor: 4, share: 4.0 / capacity},
	{name: "batch", weight: 1, floor: 2, share: 2.0 / capacity},
}

// phase is a stretch of the load during which some classes call.
type phase struct {
	name   string
	active []string
	// exact: every active class's share must be within tolerance of its
	// configured one (all classes ask); otherwise each active class gets at
	// least its share, and together they use the whole cap.
	exact bool
}

var phases = []phase{
	{name: "all three classes", active: []string{"interactive", "standard", "batch"}, exact: true},
	{name: "interactive idle", active: []string{"standard", "batch"}},
	{name: "batch alone", active: []string{"batch"}},
	{name: "interactive back", active: []string{"interactive", "batch"}},
}

// Bounds checked in each phase, after its first second.
const (
	tolerance = 0.05 // share points
	// busyShare is what the classes asking use of the cap: less than all
	// of it, since a call refused is tried again 10 to 30 ms later, and a
	// freed place waits for the next try (about 5 % of a 250 ms call, more
	// on a loaded machine). Without borrowing, "interactive idle" would use
	// 50 % and "batch alone" 17 %.
	busyShare = 0.85
	settle    = 2 * time.Second
)

type options struct {
	// busy is the least share of the cap the classes asking must use
	// (busyShare unless a test sets it).
	busy     float64
	replicas int
	redis    string
	phase    time.Duration
	hold     time.Duration
	clients  int // per class
	sample   time.Duration
	csv, png string
}

func defaultOptions() options {
	return options{busy: busyShare, replicas: 3, phase: 8 * time.Second, hold: 250 * time.Millisecond, clients: capacity, sample: 50 * time.Millisecond}
}

// sample is the calls of each class the provider was answering at one time.
type sample struct {
	at       time.Duration // since the load began
	phase    int
	inFlight []int // per class, in the order of classes
}

// result is a run's samples and what the run saw besides.
type result struct {
	o       options
	samples []sample
	// began is when each phase began, since the load began.
	began    []time.Duration
	maxTotal int // the most calls the provider answered at once
	// maxAt is when the provider first answered maxTotal calls, since the
	// load began.
	maxAt  time.Duration
	served []int64
	// unavailable counts the 503s of a store that did not answer in time
	// (tried again 50 ms later), which a loaded machine may cause.
	unavailable int64
	errors      []string
}

// run starts the replicas, runs the phases and returns what it sampled.
func run(ctx context.Context, o options, logf func(string, ...any)) (*result, error) {
	tmp, err := os.MkdirTemp("", "sluice-shares-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	src, err := proc.SluiceRoot()
	if err != nil {
		return nil, err
	}
	logf("building sluice")
	bin, err := proc.Build(ctx, src, "./cmd/sluice", filepath.Join(tmp, "sluice"))
	if err != nil {
		return nil, err
	}
	m := newMock(o.hold)
	mockAddr, stopMock, err := serve(m)
	if err != nil {
		return nil, err
	}
	defer stopMock()
	runID := fmt.Sprintf("s%d%d", os.Getpid(), time.Now().UnixNano()%1e6)
	signer, jwks, err := newSigner()
	if err != nil {
		return nil, err
	}
	jwksFile := filepath.Join(tmp, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		return nil, err
	}
	cfg := filepath.Join(tmp, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(config(mockAddr, jwksFile)), 0o600); err != nil {
		return nil, err
	}
	store := ""
	if o.replicas > 1 {
		store = o.redis
		defer proc.DeleteRedisKeys(o.redis, runID)
	}
	addrs, stop, err := startReplicas(tmp, bin, cfg, store, o.replicas)
	if err != nil {
		return nil, err
	}
	defer stop()
	tokens := map[string]string{}
	for _, c := range classes {
		if tokens[c.name], err = signer(runID, runID+"-"+c.name, c.name); err != nil {
			return nil, err
		}
	}
	logf("%d replicas up; load in %d phases of %s", o.replicas, len(phases), o.phase)
	return load(ctx, o, m, addrs, tokens), nil
}

// config is the replicas' configuration: the mock provider, the cap with
// its classes (on the org, which is the run's id in every token, so that
// the run's counters are its own on a shared Redis), the JWT issuer.
func config(mockAddr, jwksFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "providers:\n  - name: mock\n    kind: mock\n    base_url: http://%s\n", mockAddr)
	b.WriteString("models:\n  - name: mock-small\n    provider: mock\n    price: {input: 0.15, output: 0.60}\n    max_output_tokens: 64\n")
	b.WriteString("request_timeout: 20s\nusage: {calls: false}\n")
	fmt.Fprintf(&b, "auth:\n  jwt:\n    - issuer: shares\n      audience: sluice\n      jwks_file: %s\n      claims: {class: class}\n", jwksFile)
	fmt.Fprintf(&b, "rules:\n  - name: shares\n    kind: concurrency\n    subject: org\n    limit: %d\n    classes:\n", capacity)
	for _, c := range classes {
		fmt.Fprintf(&b, "      - {name: %s, weight: %d, floor: %d}\n", c.name, c.weight, c.floor)
	}
	return b.String()
}

// startReplicas starts n gateways, on store (empty: each its own embedded
// SQLite store), and waits until each is ready.
func startReplicas(dir, bin, cfg, store string, n int) ([]string, func(), error) {
	var children []*proc.Child
	stop := func() {
		for _, c := range children {
			c.Stop(10 * time.Second)
		}
	}
	ports, err := proc.FreePorts(2 * n)
	if err != nil {
		return nil, nil, err
	}
	env := proc.ChildEnv("SLUICE_CONFIG="+cfg, "SLUICE_RATE_PER_MINUTE=0", "SLUICE_DAILY_TOKEN_BUDGET=0", "SLUICE_MAX_IN_FLIGHT=0",
		"SLUICE_ADMIN_TOKEN=shares-admin-token-0123456789abcdef")
	if store != "" {
		env = append(env, "SLUICE_STORE="+store)
	}
	var addrs []string
	for i := range n {
		addr, admin := fmt.Sprintf("127.0.0.1:%d", ports[2*i]), fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		c, err := proc.Start(fmt.Sprintf("replica-%d", i), dir, bin, env, "serve", "--config", cfg,
			"--listen", addr, "--admin-listen", admin, "--data", filepath.Join(dir, fmt.Sprintf("data-%d", i)))
		if err != nil {
			stop()
			return nil, nil, err
		}
		children = append(children, c)
		addrs = append(addrs, addr)
	}
	for i, c := range children {
		if err := proc.WaitHTTP(c, "http://"+addrs[i]+"/readyz", 30*time.Second); err != nil {
			stop()
			return nil, nil, err
		}
	}
	return addrs, stop, nil
}

// newSigner makes the run's signing key: it returns a function signing a
// token for an org, a workspace and a class, and the public key set.
func newSigner() (func(org, workspace, class string) (string, error), []byte, error) {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		return nil, nil, err
	}
	key, err := jwk.Import(raw)
	if err != nil {
		return nil, nil, err
	}
	if err := key.Set(jwk.KeyIDKey, "shares"); err != nil {
		return nil, nil, err
	}
	if err := key.Set(jwk.AlgorithmKey, jwa.ES256()); err != nil {
		return nil, nil, err
	}
	pub, err := key.PublicKey()
	if err != nil {
		return nil, nil, err
	}
	set := jwk.NewSet()
	if err := set.AddKey(pub); err != nil {
		return nil, nil, err
	}
	jwks, err := json.Marshal(set)
	if err != nil {
		return nil, nil, err
	}
	sign := func(org, workspace, class string) (string, error) {
		now := time.Now()
		tok := jwt.New()
		for k, v := range map[string]any{"iss": "shares", "aud": "sluice", "sub": "load", "org": org, "workspace": workspace,
			"class": class, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()} {
			if err := tok.Set(k, v); err != nil {
				return "", err
			}
		}
		b, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), key))
		return string(b), err
	}
	return sign, jwks, nil
}

// mock is the provider: it holds each call, and counts the calls of each
// class it is answering (the class is a marker in the prompt).
type mock struct {
	inner    http.Handler
	mu       sync.Mutex
	inFlight map[string]int
	total    int
	maxTotal int
	maxAt    time.Time // when total first reached maxTotal
	served   map[string]int64
}

func newMock(hold time.Duration) *mock {
	return &mock{inner: mockprovider.New(mockprovider.Options{Latency: hold}), inFlight: map[string]int{}, served: map[string]int64{}}
}

func (m *mock) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	cls := proc.Marker(body, "cls")
	m.mu.Lock()
	m.inFlight[cls]++
	m.total++
	if m.total > m.maxTotal {
		m.maxTotal, m.maxAt = m.total, time.Now()
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.inFlight[cls]--
		m.total--
		m.served[cls]++
		m.mu.Unlock()
	}()
	m.inner.ServeHTTP(w, req)
}

// drain waits, at most for bound, until the mock answers no call.
func (m *mock) drain(bound time.Duration) {
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		idle := m.total == 0
		m.mu.Unlock()
		if idle {
			return
		}
	}
}

// counts returns the calls of each class in flight now.
func (m *mock) counts() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, len(classes))
	for i, c := range classes {
		out[i] = m.inFlight[c.name]
	}
	return out
}

func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// load runs the phases: each class's clients call while their class is
// active, and the mock is sampled throughout.
func load(ctx context.Context, o options, m *mock, addrs []string, tokens map[string]string) *result {
	r := &result{o: o}
	client := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 4 * o.clients, MaxConnsPerHost: 4 * o.clients}}
	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(r.errors) < 10 {
			r.errors = append(r.errors, fmt.Sprintf(format, args...))
		}
	}
	var unavailable atomic.Int64
	start := time.Now()
	for pi, ph := range phases {
		pctx, cancel := context.WithTimeout(ctx, o.phase)
		r.began = append(r.began, time.Since(start))
		var wg sync.WaitGroup
		for _, name := range ph.active {
			for i := range o.clients {
				wg.Go(func() { callLoop(pctx, client, addrs[i%len(addrs)], tokens[name], name, &unavailable, fail) })
			}
		}
		tick := time.NewTicker(o.sample)
	sampling:
		for {
			select {
			case <-pctx.Done():
				break sampling
			case <-tick.C:
				r.samples = append(r.samples, sample{at: time.Since(start), phase: pi, inFlight: m.counts()})
			}
		}
		tick.Stop()
		cancel()
		wg.Wait()
		// The calls the phase's end cut are settled by the gateway at
		// once, but held by the mock until it sees their connection
		// closed: the next phase starts once they are gone, so that the
		// most calls at the provider at once counts calls the gateway had
		// admitted and not settled, not calls it had cancelled.
		m.drain(2 * time.Second)
	}
	r.unavailable = unavailable.Load()
	m.mu.Lock()
	r.maxTotal, r.maxAt = m.maxTotal, m.maxAt.Sub(start)
	for _, c := range classes {
		r.served = append(r.served, m.served[c.name])
	}
	m.mu.Unlock()
	return r
}

// callLoop calls the gateway at addr as class's client until ctx ends; a
// refused call is tried again 10 to 30 ms later, a 503 50 ms later.
func callLoop(ctx context.Context, client *http.Client, addr, token, class string, unavailable *atomic.Int64, fail func(string, ...any)) {
	body := fmt.Sprintf(`{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"cls=%s hello"}]}`, class)
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			fail("%v", err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				fail("%s: %v", class, err)
			}
			return
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			pause(ctx, 10*time.Millisecond+rand.N(20*time.Millisecond))
		case http.StatusServiceUnavailable:
			unavailable.Add(1)
			pause(ctx, 50*time.Millisecond)
		default:
			fail("%s: %d %s", class, resp.StatusCode, msg)
			return
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
