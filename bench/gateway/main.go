// Command gateway is the gateway's load harness: it builds sluice, starts
// the mock provider and the gateway as separate processes, and loads the
// mock directly and through the gateway in alternation, so that both are
// measured in the same run on the same (possibly busy) machine.
//
//	go run -C bench ./gateway                        # 3 rounds of 20 s at 32 connections
//	go run -C bench ./gateway -duration 5s -rounds 2 # shorter
//
// Each round measures, direct and through the gateway (their order
// alternating from round to round): saturation at -conns connections for
// -duration; one connection for half of it; streamed requests at one
// connection for half of it (time to first byte); and a few streams from a
// second mock that waits -chunk-interval between chunks, to see that the
// gateway passes every chunk on as it arrives. CPU time per request is read
// from /proc/<pid>/stat of each process over each phase. The gateway runs
// with the default store (embedded SQLite) and the three default rules on,
// their limits raised so that none refuses. It prints a markdown report.
//
// For scale, unless -no-bare, a third target is measured in the same rounds
// and the same way: a bare fasthttp reverse proxy (bench/gateway/bareproxy,
// built from this module and run as its own process) in front of the same
// mock, so that the gateway's added latency can be read against what a
// proxy that does nothing adds on this machine in the same run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

// options are the harness's flags.
type options struct {
	duration      time.Duration
	warmup        time.Duration
	rounds        int
	conns         int
	chunkInterval time.Duration
	pacedStreams  int
	perfData      string
	perfConns     int
	perfStream    bool
	src           string
	rev           string
	store         string
	noLimits      bool
	noBare        bool
	configExtra   string
	// cacheTTL, when positive, keeps mock-small's answers in the response
	// cache: the load's identical requests are hits after the first.
	cacheTTL time.Duration
}

// The request bodies: 16 output tokens, asked for in the prompt and capped
// by max_tokens, so that the mock answers the same every time.
var (
	chatBody   = []byte(`{"model":"mock-small","messages":[{"role":"user","content":"hello [mock tokens=16]"}],"max_tokens":16}`)
	streamBody = []byte(`{"model":"mock-small","messages":[{"role":"user","content":"hello [mock tokens=16]"}],"max_tokens":16,"stream":true}`)
	pacedBody  = []byte(`{"model":"paced-small","messages":[{"role":"user","content":"hello [mock tokens=16]"}],"max_tokens":16,"stream":true}`)
	// The paced mock serves mock-small; the gateway knows it as paced-small.
	pacedDirectBody = []byte(`{"model":"mock-small","messages":[{"role":"user","content":"hello [mock tokens=16]"}],"max_tokens":16,"stream":true}`)
)

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "length of each saturation phase; the one-connection and streaming phases take half")
	flag.DurationVar(&o.warmup, "warmup", 3*time.Second, "warm-up load on each target before the rounds")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of direct and gateway phases")
	flag.IntVar(&o.conns, "conns", 32, "connections of the saturation phases")
	flag.DurationVar(&o.chunkInterval, "chunk-interval", 20*time.Millisecond, "the paced mock's wait between streamed chunks")
	flag.IntVar(&o.pacedStreams, "paced-streams", 5, "paced streams per target per round")
	flag.StringVar(&o.perfData, "perf", "", "after the rounds, profile the gateway with perf record during one more saturation phase, into this file")
	flag.IntVar(&o.perfConns, "perf-conns", 0, "connections of the -perf phase (default -conns); 1 profiles the one-connection path")
	flag.BoolVar(&o.perfStream, "perf-stream", false, "the -perf phase sends streamed requests instead")
	flag.StringVar(&o.src, "src", "", "module to build sluice from (default: the repository root, the module bench/go.mod replaces)")
	flag.StringVar(&o.rev, "rev", "", "build sluice from this git revision of the module (git archive) instead of the working tree")
	flag.StringVar(&o.store, "store", "", "the gateway's --store URL, for comparisons (default: embedded SQLite under the data directory)")
	flag.BoolVar(&o.noLimits, "no-limits", false, "for comparisons: turn the three default rules off (their knobs at 0) instead of raising them")
	flag.BoolVar(&o.noBare, "no-bare", false, "skip the bare fasthttp proxy measured for scale beside the gateway")
	flag.DurationVar(&o.cacheTTL, "cache-ttl", 0, "keep mock-small's answers in the response cache this long (its cache.ttl): a hit's cost")
	flag.StringVar(&o.configExtra, "config-extra", "", "YAML appended to the gateway's config, for comparisons (e.g. 'usage: {calls: false}')")
	flag.Parse()
	if o.duration <= 0 || o.rounds < 1 || o.conns < 1 || o.chunkInterval <= 0 || o.pacedStreams < 1 {
		fmt.Fprintln(os.Stderr, "bench/gateway: -duration, -rounds, -conns, -chunk-interval and -paced-streams must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/gateway:", err)
		os.Exit(1)
	}
}

// run sets up the processes, always stopping them, and measures.
func run(ctx context.Context, o options) error {
	src := o.src
	if src == "" {
		var err error
		if src, err = proc.SluiceRoot(); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	info := machine(src)
	buildDir := src
	if o.rev != "" {
		buildDir = filepath.Join(tmp, "src")
		if info.commit, err = exportRev(ctx, src, o.rev, buildDir); err != nil {
			return err
		}
	}
	proc.Logf("building sluice from %s (%s)", buildDir, info.commit)
	bin, err := buildSluice(ctx, buildDir, tmp)
	if err != nil {
		return err
	}
	var bareBin string
	if !o.noBare {
		// The peer is built from the bench module (the harness's), not
		// from -src or -rev: it is not what is measured.
		root, err := proc.BenchRoot()
		if err != nil {
			return err
		}
		proc.Logf("building the bare proxy from %s", root)
		if bareBin, err = buildBareProxy(ctx, root, tmp); err != nil {
			return err
		}
	}
	ports, err := proc.FreePorts(5)
	if err != nil {
		return err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	mockAddr, pacedAddr, gwAddr, adminAddr, bareAddr := addr(0), addr(1), addr(2), addr(3), addr(4)

	env := proc.ChildEnv()
	mock, err := proc.Start("mock", tmp, bin, env, "mock", "--listen", mockAddr)
	if err != nil {
		return err
	}
	defer mock.Stop(5 * time.Second)
	paced, err := proc.Start("paced-mock", tmp, bin, env, "mock", "--listen", pacedAddr, "--chunk-interval", o.chunkInterval.String())
	if err != nil {
		return err
	}
	defer paced.Stop(5 * time.Second)
	for _, m := range []struct {
		c    *proc.Child
		addr string
	}{{mock, mockAddr}, {paced, pacedAddr}} {
		if err := proc.WaitHTTP(m.c, "http://"+m.addr+"/v1/models", 30*time.Second); err != nil {
			return err
		}
	}

	cfgPath := filepath.Join(tmp, "sluice.yaml")
	if err := writeConfig(cfgPath, gwAddr, adminAddr, filepath.Join(tmp, "data"), mockAddr, pacedAddr, o.configExtra, o.cacheTTL); err != nil {
		return err
	}
	gwVars := []string{"SLUICE_ADMIN_TOKEN=bench-admin-token"}
	if o.noLimits {
		gwVars = append(gwVars, "SLUICE_RATE_PER_MINUTE=0", "SLUICE_DAILY_TOKEN_BUDGET=0", "SLUICE_MAX_IN_FLIGHT=0")
	} else {
		gwVars = append(gwVars, knobs...)
	}
	if o.store != "" {
		gwVars = append(gwVars, "SLUICE_STORE="+o.store)
	}
	gwEnv := proc.ChildEnv(gwVars...)
	key, err := createKey(ctx, bin, cfgPath, gwEnv)
	if err != nil {
		return err
	}
	gw, err := proc.Start("gateway", tmp, bin, gwEnv, "serve", "--config", cfgPath)
	if err != nil {
		return err
	}
	defer gw.Stop(10 * time.Second)
	if err := proc.WaitHTTP(gw, "http://"+gwAddr+"/healthz", 30*time.Second); err != nil {
		return err
	}
	proc.Logf("mock on %s (pid %d), paced mock on %s (pid %d), gateway on %s (pid %d)",
		mockAddr, mock.Pid(), pacedAddr, paced.Pid(), gwAddr, gw.Pid())

	b := &bench{o: o, hz: clockTicks(), gw: gw,
		direct:  newTarget("direct", mockAddr, "Bearer "+key, o.conns),
		gateway: newTarget("gateway", gwAddr, "Bearer "+key, o.conns),
		p:       procs{gateway: gw.Pid(), mock: mock.Pid()},
	}
	if bareBin != "" {
		bare, err := proc.Start("bareproxy", tmp, bareBin, proc.ChildEnv(), "-listen", bareAddr, "-upstream", mockAddr)
		if err != nil {
			return err
		}
		defer bare.Stop(5 * time.Second)
		if err := proc.WaitHTTP(bare, "http://"+bareAddr+"/v1/models", 30*time.Second); err != nil {
			return err
		}
		proc.Logf("bare fasthttp proxy on %s (pid %d), in front of the mock", bareAddr, bare.Pid())
		b.bare = newTarget("bare", bareAddr, "Bearer "+key, o.conns)
		b.p.bare = bare.Pid()
	}
	b.pacedDirect = &target{name: "direct", addr: pacedAddr, path: "/v1/chat/completions", auth: b.direct.auth}
	b.pacedGateway = &target{name: "gateway", addr: gwAddr, path: "/v1/chat/completions", auth: b.gateway.auth}
	b.start = info
	b.start.load = loadInfo()
	if err := b.check(); err != nil {
		return err
	}
	if err := b.measure(ctx); err != nil {
		return fmt.Errorf("%w\ngateway log:\n%s", err, gw.Tail(20))
	}
	rss, hwm, err := memKiB(gw.Pid())
	if err != nil {
		return fmt.Errorf("gateway memory: %w", err)
	}
	b.rssKiB, b.hwmKiB = rss, hwm
	b.endLoad = loadInfo()
	if o.perfData != "" {
		if err := b.profile(ctx, o.perfData); err != nil {
			return err
		}
	}
	b.report(os.Stdout)
	if gw.Exited() {
		return fmt.Errorf("the gateway exited during the run:\n%s", gw.Tail(20))
	}
	return nil
}

// bench holds the run's targets and results.
type bench struct {
	o            options
	hz           int64
	gw           *proc.Child
	p            procs
	direct       *target
	gateway      *target
	bare         *target // the bare fasthttp proxy; nil with -no-bare
	pacedDirect  *target
	pacedGateway *target
	start        machineInfo
	endLoad      string
	rounds       []*round
	rssKiB       int64
	hwmKiB       int64
	profileText  string
}

// round is one round's phases, by target name.
type round struct {
	order      []string
	saturation map[string]*phase
	single     map[string]*phase
	streamed   map[string]*phase
	paced      map[string]*pacing
	load       string
}

// targets are the targets of the load phases: direct, the gateway and, for
// scale, the bare proxy.
func (b *bench) targets() []*target {
	ts := []*target{b.direct, b.gateway}
	if b.bare != nil {
		ts = append(ts, b.bare)
	}
	return ts
}

// check makes one request through the gateway and one direct (and one
// through the bare proxy), to fail early with a clear message.
func (b *bench) check() error {
	for _, t := range b.targets() {
		w := newFastWorker(t, chatBody)
		if _, err := w.do(context.Background()); err != nil {
			return fmt.Errorf("first request via %s: %w", t.name, err)
		}
		if t == b.gateway {
			if got := string(w.resp.Header.Peek("X-Sluice-Model")); got != "mock-small" {
				return fmt.Errorf("first request via the gateway: X-Sluice-Model %q, want mock-small", got)
			}
		}
	}
	return nil
}

// measure warms up, then runs the rounds.
func (b *bench) measure(ctx context.Context) error {
	proc.Logf("warm-up: %s on each target", b.o.warmup)
	for _, t := range b.targets() {
		if _, err := runPhase(ctx, t.name, b.o.conns, b.o.warmup, b.p, b.fast(t)); err != nil {
			return err
		}
		if _, err := runPhase(ctx, t.name, 1, b.o.warmup/3, b.p, b.streams(t)); err != nil {
			return err
		}
	}
	half := b.o.duration / 2
	for i := range b.o.rounds {
		r := &round{saturation: map[string]*phase{}, single: map[string]*phase{}, streamed: map[string]*phase{},
			paced: map[string]*pacing{}, load: loadInfo()}
		targets := []*target{b.direct, b.gateway}
		if i%2 == 1 {
			targets[0], targets[1] = targets[1], targets[0]
		}
		if b.bare != nil {
			// Direct and the gateway keep their alternating order; the
			// bare proxy goes first, between them, then last.
			targets = slices.Insert(targets, i%3, b.bare)
		}
		for _, t := range targets {
			r.order = append(r.order, t.name)
		}
		proc.Logf("round %d/%d (%s first): %s", i+1, b.o.rounds, targets[0].name, r.load)
		steps := []struct {
			into  map[string]*phase
			conns int
			d     time.Duration
			work  func(*target) func() worker
		}{
			{r.saturation, b.o.conns, b.o.duration, b.fast},
			{r.single, 1, half, b.fast},
			{r.streamed, 1, half, b.streams},
		}
		for _, s := range steps {
			for _, t := range targets {
				ph, err := runPhase(ctx, t.name, s.conns, s.d, b.p, s.work(t))
				if err != nil {
					return err
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.into[t.name] = ph
				bare := ""
				if b.bare != nil {
					bare = fmt.Sprintf("  bare %.1f µs/req", ph.perRequest(ph.bareTicks, b.hz))
				}
				proc.Logf("  %-7s conns %-3d %8.0f req/s  p50 %s  p99 %s  gateway %.1f µs/req%s  failed %d %s",
					t.name, s.conns, ph.rate(), micros(ph.quantile(0.5)), micros(ph.quantile(0.99)),
					ph.perRequest(ph.gatewayTicks, b.hz), bare, ph.failed, ph.errText)
			}
		}
		for _, name := range r.order {
			t, body := b.pacedDirect, pacedDirectBody
			switch name {
			case "gateway":
				t, body = b.pacedGateway, pacedBody
			case "bare":
				continue // the bare proxy fronts the unpaced mock only
			}
			p, err := measurePacing(ctx, t, body, b.o.pacedStreams, b.o.chunkInterval)
			if err != nil {
				return err
			}
			r.paced[name] = p
		}
		b.rounds = append(b.rounds, r)
	}
	return nil
}

func (b *bench) fast(t *target) func() worker {
	return func() worker { return newFastWorker(t, chatBody) }
}

func (b *bench) streams(t *target) func() worker {
	return func() worker { return newStreamWorker(t, streamBody) }
}

// micros formats a duration in whole microseconds.
func micros(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " µs"
}
