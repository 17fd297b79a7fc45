package pgstore_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
)

// proxy forwards TCP connections from a loopback port to PostgreSQL, and can
// stall (accept and forward nothing, like a server that stopped answering) or
// cut (close every connection, and each new one at once, like a server that
// is gone), then come back on the same port. The port is held from start to
// cleanup, so that no other test can take it during a cut.
type proxy struct {
	target string
	addr   string
	// delay, if set, holds every chunk that long in each direction, like
	// a network between the client and the server.
	delay time.Duration

	mu      sync.Mutex
	down    bool // cut: each connection is closed as it is accepted
	conns   map[net.Conn]struct{}
	stalled chan struct{} // closed while forwarding; replaced by stall
	wg      sync.WaitGroup
}

func startProxy(t testing.TB, target string) *proxy {
	return startDelayProxy(t, target, 0)
}

func startDelayProxy(t testing.TB, target string, delay time.Duration) *proxy {
	t.Helper()
	p := &proxy{target: target, delay: delay, conns: map[net.Conn]struct{}{}, stalled: make(chan struct{})}
	close(p.stalled)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
	t.Cleanup(func() {
		p.cut()
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

func (p *proxy) forward(client net.Conn) {
	if !p.track(client) {
		client.Close()
		return
	}
	<-p.gate()
	server, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(server) {
		client.Close()
		if server != nil {
			server.Close()
		}
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				<-p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	if p.delay > 0 {
		pipe = p.delayedPipe
	}
	wg.Go(func() { pipe(server, client) })
	wg.Go(func() { pipe(client, server) })
	wg.Wait()
}

// delayedPipe copies src to dst, each chunk p.delay after it was read,
// without holding back the chunks behind it.
func (p *proxy) delayedPipe(dst, src net.Conn) {
	type chunk struct {
		at   time.Time
		data []byte
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now().Add(p.delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	defer src.Close()
	for c := range chunks {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// stall keeps every connection open and forwards nothing.
func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = make(chan struct{})
}

// cut closes every connection, and from now on each new one as it is
// accepted.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	select {
	case <-p.stalled:
	default:
		close(p.stalled) // let the stalled copies see their closed conns
	}
}

// restore forwards new connections again.
func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// TestOutage_FailsFastAndRecoversWithoutRestart points a Store at a proxy,
// then makes the server stop answering (admissions fail as store errors
// within the timeout), then go away (they fail at once), then come back on
// the same port: the same Store admits again, with no goroutine left behind.
func TestOutage_FailsFastAndRecoversWithoutRestart(t *testing.T) {
	u, err := url.Parse(postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, u.Host)
	u.Host = p.addr
	const timeout = time.Second
	s := openStore(t, testSchema(t), pgstore.Options{URL: u.String(), Timeout: timeout, MaxConns: 4})
	l, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1 << 40, Window: time.Minute},
		{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1 << 50, Period: sluice.PeriodDay},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := sluice.Request{Identity: sluice.Identity{Workspace: "w", Key: "k"}, Max: sluice.Usage{InputTokens: 10}}
	admitSettle := func() error {
		r, err := l.Admit(ctx, req)
		if err != nil {
			return err
		}
		return r.Settle(ctx, sluice.Usage{InputTokens: 5})
	}
	// hammer runs n admissions from 8 goroutines and returns the errors and
	// the slowest call.
	hammer := func(n int) (errs []error, slowest time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 8 {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					start := time.Now()
					err := admitSettle()
					d := time.Since(start)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					}
					slowest = max(slowest, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return errs, slowest
	}

	if errs, _ := hammer(64); len(errs) > 0 {
		t.Fatalf("before the outage: %v", errs[0])
	}
	before := runtime.NumGoroutine()

	p.stall()
	errs, slowest := hammer(24)
	t.Logf("stalled server: %d of 24 failed, slowest call %v (timeout %v)", len(errs), slowest, timeout)
	checkStoreErrors(t, errs, 24)
	// Settle may follow a successful admission, so a call is at most two
	// timeouts, plus scheduling slack on a loaded machine.
	if slowest > 2*timeout+500*time.Millisecond {
		t.Fatalf("slowest call %v with a timeout of %v", slowest, timeout)
	}

	p.cut()
	errs, slowest = hammer(24)
	t.Logf("server gone: %d of 24 failed, slowest call %v", len(errs), slowest)
	checkStoreErrors(t, errs, 24)
	if slowest > timeout+500*time.Millisecond {
		t.Fatalf("slowest call %v with the port closed", slowest)
	}
	if _, err := l.Sweep(ctx); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("sweep while the server is gone: %v", err)
	}

	// Every goroutine the outage started ends, but the releases of the
	// admissions that timed out, which retry until the database answers:
	// allow a few for the pool's background work and the proxy's accept
	// loop.
	deadline := time.Now().Add(5 * time.Second)
	allowed := func() int { return before + 4 + int(pgstore.PendingCancels(s)) }
	for runtime.NumGoroutine() > allowed() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > allowed() {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after the outage, %d before:\n%s", after, before, buf[:runtime.Stack(buf, true)])
	}

	p.restore()
	recovered := time.Now()
	for {
		err := admitSettle()
		if err == nil {
			break
		}
		if !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("after the server returned: %v", err)
		}
		if time.Since(recovered) > 10*time.Second {
			t.Fatalf("still failing 10s after the server returned: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("admitting again %v after the server returned", time.Since(recovered))
	if errs, _ := hammer(64); len(errs) > 0 {
		t.Fatalf("after recovery: %d failed: %v", len(errs), errs[0])
	}
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatalf("sweep after recovery: %v", err)
	}
}

// checkStoreErrors expects every one of n calls to have failed as a store
// error.
func checkStoreErrors(t *testing.T, errs []error, n int) {
	t.Helper()
	if len(errs) != n {
		t.Fatalf("%d of %d calls failed during the outage, want all", len(errs), n)
	}
	for _, err := range errs {
		var se *sluice.StoreError
		if !errors.As(err, &se) || !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("error %v (%T), want a *sluice.StoreError", err, err)
		}
	}
}
