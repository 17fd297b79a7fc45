package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestOpen_BadURLs(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", "no URL"},
		{"127.0.0.1:6379", "not a URL"},
		{"http://127.0.0.1:6379", `scheme "http"`},
		{"redis://", "no host"},
		{"redis://:6379", "no host"},
		{"redis://127.0.0.1:notaport", "invalid port"},
		{"redis://127.0.0.1:6379/x", `database "x"`},
		{"redis-cluster://", "no hosts"},
		{"redis-cluster://127.0.0.1", "not host:port"},
		{"redis-cluster://127.0.0.1:7001,:7002", "no host"},
		{"redis-cluster://127.0.0.1:7001,127.0.0.1:0", "no valid port"},
		{"redis-cluster://127.0.0.1:7001/3", "only database 0"},
		{"redis-cluster://user:secret@127.0.0.1:x", "no valid port"},
	} {
		_, err := redisstore.Open(context.Background(), redisstore.Options{URL: tc.url})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v, want an error containing %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): error %q shows the password", tc.url, err)
		}
	}
	if _, err := redisstore.Open(context.Background(), redisstore.Options{URL: "redis://127.0.0.1:6379", Prefix: "a{b"}); err == nil {
		t.Error("a prefix with a brace was accepted")
	}
}

func TestOpen_UnreachableServerFailsFast(t *testing.T) {
	addr := testenv.RefusedAddr(t) // held: nothing can start listening there meanwhile
	start := time.Now()
	_, err := redisstore.Open(context.Background(), redisstore.Options{URL: "redis://" + addr})
	if err == nil {
		t.Fatal("opened a store on a port nobody listens on")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Open took %v to fail", d)
	}
}

func TestOpen_URLKindMustMatchServer(t *testing.T) {
	url := redisURL(t)
	cl := clusterURL(t)
	first := strings.Split(strings.TrimPrefix(cl, "redis-cluster://"), ",")[0]
	if _, err := redisstore.Open(context.Background(), redisstore.Options{URL: "redis://" + first}); err == nil || !strings.Contains(err.Error(), "use redis-cluster://") {
		t.Errorf("redis:// to a cluster node: %v", err)
	}
	standalone := strings.TrimPrefix(url, "redis://")
	if i := strings.IndexByte(standalone, '/'); i >= 0 {
		standalone = standalone[:i]
	}
	if _, err := redisstore.Open(context.Background(), redisstore.Options{URL: "redis-cluster://" + standalone}); err == nil || !strings.Contains(err.Error(), "not a Redis Cluster") {
		t.Errorf("redis-cluster:// to a standalone server: %v", err)
	}
}

func TestCheck_PrecisionBounds(t *testing.T) {
	for _, tc := range []struct {
		rule sluice.Rule
		ok   bool
	}{
		{sluice.Rule{Kind: sluice.KindRate, Limit: 18_000_000, Window: time.Minute}, true},
		{sluice.Rule{Kind: sluice.KindRate, Limit: 1_000_000, Window: 24 * time.Hour}, true},
		{sluice.Rule{Kind: sluice.KindRate, Limit: 3, Window: time.Second}, true},
		{sluice.Rule{Kind: sluice.KindRate, Limit: 1_000_003, Window: 24 * time.Hour}, false},
		{sluice.Rule{Kind: sluice.KindRate, Limit: 10, Window: time.Nanosecond}, false},
		{sluice.Rule{Kind: sluice.KindBudget, Limit: 1 << 51}, true},
		{sluice.Rule{Kind: sluice.KindBudget, Limit: 1<<51 + 1}, false},
	} {
		err := redisstore.Check(tc.rule)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, redisstore.ErrPrecision) {
			t.Errorf("Check(%d per %v, %s): %v", tc.rule.Limit, tc.rule.Window, tc.rule.Kind, err)
		}
	}
}

// TestPrecision_InexactRuleRefused checks that a rule beyond exact Lua
// arithmetic fails closed with a clear error, and that a large exact one
// admits exactly its burst.
func TestPrecision_InexactRuleRefused(t *testing.T) {
	url := redisURL(t)
	h := harness(t, redisstore.Options{URL: url, PinTime: true})
	odd := sluice.Rule{Name: "odd", Kind: sluice.KindRate, Subject: "key", Limit: 1_000_003, Window: 24 * time.Hour}
	_, err := h.Limiter(odd).Admit(h.Ctx, storetest.Key("k"))
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, redisstore.ErrPrecision) {
		t.Fatalf("admit under an inexact rule: %v, want a store error wrapping ErrPrecision", err)
	}

	big := sluice.Rule{Name: "tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: 18_000_000, Window: time.Minute}
	l := h.Limiter(big)
	h.Admit(l, storetest.Tokens("k", 17_999_999, 0))
	h.Admit(l, storetest.Tokens("k", 1, 0))
	err = h.Refuse(l, storetest.Tokens("k", 1, 0), sluice.ErrRateLimited)
	var rl *sluice.RateLimitError
	// One token refills in 60s/18e6 = 3.33µs; retry after rounds up to 1ms.
	if !errors.As(err, &rl) || rl.RetryAfter != time.Millisecond {
		t.Fatalf("refusal %v, want a retry after 1ms", err)
	}
	h.Clock.Advance(time.Minute)
	if _, rem := h.Used(l, storetest.Key("k").Identity, "tpm"); rem != 18_000_000 {
		t.Fatalf("remaining after a window %d, want 18000000", rem)
	}
}

// harness returns a conformance harness over a store opened with opts.
func harness(t *testing.T, opts redisstore.Options) *storetest.Harness {
	s := openStore(t, opts)
	return &storetest.Harness{T: t, Store: s, Clock: storetest.NewClock(storetest.Start), Ctx: context.Background()}
}

// TestScriptFlush_Recovers flushes the server's script cache during a run:
// the next admission reloads the scripts (NOSCRIPT, then EVAL).
func TestScriptFlush_Recovers(t *testing.T) {
	for _, tc := range []struct{ name, url string }{{"standalone", redisURL(t)}, {"cluster", clusterURL(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			h := harness(t, redisstore.Options{URL: tc.url, PinTime: true})
			l := h.Limiter(sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 100, Window: time.Minute},
				sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1000, Period: sluice.PeriodDay, Metric: sluice.MetricTokens})
			r := h.Admit(l, storetest.Tokens("k", 10, 0))
			flushScripts(t, tc.url)
			h.Settle(r, sluice.Usage{InputTokens: 5})
			flushScripts(t, tc.url)
			for range 3 {
				h.Admit(l, storetest.Tokens("k", 10, 0))
			}
			flushScripts(t, tc.url)
			h.Clock.Advance(2 * time.Minute)
			if res, err := l.Sweep(h.Ctx); err != nil || res.Reservations != 3 {
				t.Fatalf("sweep after a flush: %+v %v", res, err)
			}
			if used, _ := h.Used(l, storetest.Key("k").Identity, "daily"); used != 35 {
				t.Fatalf("used %d, want 35", used)
			}
		})
	}
}

// flushScripts empties the script cache of every server behind url.
func flushScripts(t *testing.T, url string) {
	t.Helper()
	c := rawClient(t, url)
	defer c.Close()
	ctx := context.Background()
	for _, node := range c.Nodes() {
		if err := node.Do(ctx, node.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatalf("script flush: %v", err)
		}
	}
}

// rawClient connects to the servers behind a store URL.
func rawClient(t testing.TB, url string) rueidis.Client {
	t.Helper()
	var co rueidis.ClientOption
	if rest, ok := strings.CutPrefix(url, "redis-cluster://"); ok {
		co.InitAddress = strings.Split(rest, ",")
	} else {
		var err error
		if co, err = rueidis.ParseURL(url); err != nil {
			t.Fatal(err)
		}
		co.ForceSingleClient = true
	}
	co.DisableCache = true
	c, err := rueidis.NewClient(co)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// countingClient counts the commands sent through it.
type countingClient struct {
	rueidis.Client
	commands atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.commands.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.commands.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

// TestDenyCache_HotRefusedKeyStopsReachingRedis checks that, with the deny
// cache, a key refused until some time is refused locally until then.
func TestDenyCache_HotRefusedKeyStopsReachingRedis(t *testing.T) {
	url := redisURL(t)
	cc := &countingClient{Client: rawClient(t, url)}
	defer cc.Client.Close()
	prefix := freePrefixFor(t, url)
	h := harness(t, redisstore.Options{URL: url, Client: cc, Prefix: prefix, PinTime: true, DenyCache: true})
	rate := sluice.Rule{Name: "rph", Kind: sluice.KindRate, Subject: "key", Limit: 2, Window: time.Hour}
	budget := sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Limit: 100, Period: sluice.PeriodDay, Metric: sluice.MetricTokens}
	l := h.Limiter(rate, budget)
	h.Admit(l, storetest.Tokens("hot", 10, 0))
	h.Admit(l, storetest.Tokens("hot", 10, 0))
	h.Refuse(l, storetest.Tokens("hot", 10, 0), sluice.ErrRateLimited)
	before := cc.commands.Load()
	for range 100 {
		err := h.Refuse(l, storetest.Tokens("hot", 10, 0), sluice.ErrRateLimited)
		var rl *sluice.RateLimitError
		if !errors.As(err, &rl) || rl.RetryAfter != 30*time.Minute {
			t.Fatalf("cached refusal %v, want retry after 30m", err)
		}
	}
	if n := cc.commands.Load() - before; n != 0 {
		t.Fatalf("%d commands reached Redis for a key refused locally", n)
	}
	// Another key still reaches Redis; once the refusal expires the hot key
	// does too.
	h.Admit(l, storetest.Tokens("cold", 10, 0))
	if cc.commands.Load() == before {
		t.Fatal("an unrelated key did not reach Redis")
	}
	h.Clock.Advance(30 * time.Minute)
	h.Admit(l, storetest.Tokens("hot", 10, 0))

	// A spent budget is refused locally too (until its reset, at most
	// DenyCacheMaxAge).
	h.Admit(l, storetest.Tokens("other", 60, 0)) // 100 of 100 used
	h.Refuse(l, storetest.Tokens("other", 10, 0), sluice.ErrBudgetExhausted)
	before = cc.commands.Load()
	for range 50 {
		h.Refuse(l, storetest.Tokens("other", 10, 0), sluice.ErrBudgetExhausted)
	}
	if n := cc.commands.Load() - before; n != 0 {
		t.Fatalf("%d commands reached Redis for a spent budget", n)
	}
	if hits := h.Store.(*redisstore.Store).Stats().DenyCacheHits; hits != 150 {
		t.Fatalf("deny cache hits %d, want 150", hits)
	}
}

// freePrefixFor returns a fresh prefix whose keys are deleted at the end.
func freePrefixFor(t *testing.T, url string) string {
	p := freshPrefix()
	t.Cleanup(func() { deleteKeys(t, url, p) })
	return p
}

// TestOutage_FailsFastAndRecovers kills the Redis server under a Store:
// admissions fail as store errors within the timeout, no goroutine is left
// behind, and once the server is back on the same port the same Store
// admits again.
func TestOutage_FailsFastAndRecovers(t *testing.T) {
	redisURL(t)
	srv := startRedis(t)
	url := "redis://" + srv.addr() + "/0"
	const timeout = 500 * time.Millisecond
	// Failing "fast" allows for a loaded CI machine's scheduling delays
	// (the race detector, other packages' tests): what this rules out is a
	// hang.
	const slack = time.Second
	s := openStore(t, redisstore.Options{URL: url, Timeout: timeout})
	l, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1_000_000, Window: time.Minute},
		{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1000},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admitOK := func() error {
		r, err := l.Admit(ctx, storetest.Key("k"))
		if err != nil {
			return err
		}
		return r.Settle(ctx, sluice.Usage{})
	}
	if err := admitOK(); err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()

	srv.kill()
	var slowest time.Duration
	for i := range 20 {
		start := time.Now()
		_, err := l.Admit(ctx, storetest.Key("k"))
		took := time.Since(start)
		if !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("admission %d with Redis down: %v, want store unavailable", i, err)
		}
		if took > timeout+slack {
			t.Fatalf("admission %d with Redis down took %v, want within the %v timeout", i, took, timeout)
		}
		slowest = max(slowest, took)
	}

	t.Logf("20 admissions with Redis killed: the slowest failed after %v", slowest)
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for admitOK() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("admissions still fail 5s after Redis returned: %v", admitOK())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 20 {
		if err := admitOK(); err != nil {
			t.Fatalf("admission %d after recovery: %v", i, err)
		}
	}

	// A server that hangs (stopped, its connections open) is a timeout,
	// not a hang.
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		start := time.Now()
		_, err := l.Admit(ctx, storetest.Key("k"))
		took := time.Since(start)
		if !errors.Is(err, sluice.ErrStoreUnavailable) || took > timeout+slack {
			_ = srv.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("admission %d with Redis stopped: %v after %v, want store unavailable within %v", i, err, took, timeout)
		}
		t.Logf("admission %d with Redis stopped failed after %v", i, took)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for admitOK() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("admissions still fail after Redis resumed: %v", admitOK())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Goroutines settle back to about where they were: the client's
	// connection goroutines are replaced, not piled up. A pile-up would be
	// one or more per failed admission (25 above); the client may keep a
	// few more than before, for a connection it opened while the server
	// hung (seen: 3 more, on a loaded machine).
	deadline = time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines+5 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d before the outage, %d after", goroutines, runtime.NumGoroutine())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
