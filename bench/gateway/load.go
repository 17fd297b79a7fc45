package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// requestTimeout bounds every request of the load, so that a phase never
// outlasts its duration by more than this.
const requestTimeout = 10 * time.Second

// target is where a phase sends its requests.
type target struct {
	name string // "direct" or "gateway"
	addr string // host:port
	path string
	// auth is the Authorization header; the direct target gets the same
	// header, which the mock ignores, so that both requests are alike.
	auth string
	// fast is the keep-alive fasthttp client of non-streamed phases.
	fast *fasthttp.HostClient
}

func newTarget(name, addr, auth string, conns int) *target {
	return &target{name: name, addr: addr, path: "/v1/chat/completions", auth: auth,
		fast: &fasthttp.HostClient{
			Addr:     addr,
			MaxConns: conns,
			// The gateway closes a connection idle for its header timeout
			// (10 s by default), and a POST sent on a connection it has just
			// closed fails, not retried: connections left idle while the
			// other target is measured are dropped well before that.
			MaxIdleConnDuration:      3 * time.Second,
			ReadTimeout:              requestTimeout,
			WriteTimeout:             requestTimeout,
			NoDefaultUserAgentHeader: true,
			DisablePathNormalizing:   true,
		}}
}

// worker sends one request at a time on its own connection and returns the
// latency sample of each: the whole response, or the first byte of a stream.
type worker interface {
	do(ctx context.Context) (time.Duration, error)
}

// fastWorker sends non-streamed requests through fasthttp, reusing its
// request and response.
type fastWorker struct {
	t    *target
	req  *fasthttp.Request
	resp *fasthttp.Response
}

func newFastWorker(t *target, body []byte) *fastWorker {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + t.addr + t.path)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", t.auth)
	req.SetBody(body)
	return &fastWorker{t: t, req: req, resp: fasthttp.AcquireResponse()}
}

func (w *fastWorker) do(context.Context) (time.Duration, error) {
	t0 := time.Now()
	err := w.t.fast.DoDeadline(w.req, w.resp, t0.Add(requestTimeout))
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	if w.resp.StatusCode() != fasthttp.StatusOK {
		return d, fmt.Errorf("status %d: %.200s", w.resp.StatusCode(), w.resp.Body())
	}
	if !bytes.Contains(w.resp.Body(), []byte(`"completion_tokens":16`)) {
		return d, fmt.Errorf("answer without the expected usage: %.200s", w.resp.Body())
	}
	return d, nil
}

// streamWorker sends streamed requests through net/http on one connection
// and reports the time to the first byte of the body.
type streamWorker struct {
	t      *target
	body   []byte
	client *http.Client
	buf    []byte
}

func newStreamWorker(t *target, body []byte) *streamWorker {
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true,
		IdleConnTimeout: time.Minute, ResponseHeaderTimeout: requestTimeout}
	return &streamWorker{t: t, body: body, client: &http.Client{Transport: tr}, buf: make([]byte, 32<<10)}
}

func (w *streamWorker) do(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+w.t.addr+w.t.path, bytes.NewReader(w.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", w.t.auth)
	t0 := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		return time.Since(t0), err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return time.Since(t0), fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	n, err := resp.Body.Read(w.buf)
	ttfb := time.Since(t0)
	if n == 0 {
		return ttfb, fmt.Errorf("no first byte: %w", err)
	}
	last := append([]byte(nil), w.buf[:n]...)
	for err == nil {
		n, err = resp.Body.Read(w.buf)
		if n > 0 {
			last = append(last[:0], w.buf[:n]...)
		}
	}
	if !errors.Is(err, io.EOF) {
		return ttfb, err
	}
	if !bytes.HasSuffix(last, []byte("data: [DONE]\n\n")) {
		return ttfb, fmt.Errorf("stream did not end with [DONE]: %q", last)
	}
	return ttfb, nil
}

// procs are the processes whose CPU time a phase accounts for; bare, the
// bare proxy, is 0 when there is none.
type procs struct {
	gateway, mock, bare int
}

// phase is one measured period of closed-loop load.
type phase struct {
	label   string // what was loaded: direct, gateway
	conns   int
	elapsed time.Duration
	ok      int
	failed  int
	errText string // the first failure
	samples []time.Duration
	// CPU time over the phase, in clock ticks, of the gateway, the mock
	// and the harness itself (the load generator), and of the bare proxy.
	gatewayTicks, mockTicks, clientTicks, bareTicks int64
}

// runPhase runs conns workers in a closed loop for d and accounts the CPU
// time of p over the phase.
func runPhase(ctx context.Context, label string, conns int, d time.Duration, p procs, newWorker func() worker) (*phase, error) {
	workers := make([]worker, conns)
	for i := range workers {
		workers[i] = newWorker()
	}
	ph := &phase{label: label, conns: conns}
	var before [4]int64
	if err := readTicks(p, &before); err != nil {
		return nil, err
	}
	start := time.Now()
	deadline := start.Add(d)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			samples := make([]time.Duration, 0, 4096)
			ok, failed := 0, 0
			var first error
			for ctx.Err() == nil {
				lat, err := w.do(ctx)
				if err != nil {
					if ctx.Err() != nil {
						break // cut by the phase's end: not a failure
					}
					failed++
					if first == nil {
						first = err
					}
					// Do not spin on a dead server.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				ok++
				samples = append(samples, lat)
			}
			mu.Lock()
			defer mu.Unlock()
			ph.ok += ok
			ph.failed += failed
			ph.samples = append(ph.samples, samples...)
			if first != nil && ph.errText == "" {
				ph.errText = first.Error()
			}
		})
	}
	wg.Wait()
	ph.elapsed = time.Since(start)
	var after [4]int64
	if err := readTicks(p, &after); err != nil {
		return nil, err
	}
	ph.gatewayTicks = after[0] - before[0]
	ph.mockTicks = after[1] - before[1]
	ph.clientTicks = after[2] - before[2]
	ph.bareTicks = after[3] - before[3]
	slices.Sort(ph.samples)
	return ph, nil
}

func readTicks(p procs, out *[4]int64) error {
	var err error
	if out[0], err = cpuTicks(p.gateway); err != nil {
		return fmt.Errorf("gateway CPU: %w", err)
	}
	if out[1], err = cpuTicks(p.mock); err != nil {
		return fmt.Errorf("mock CPU: %w", err)
	}
	if out[2], err = cpuTicks(0); err != nil {
		return fmt.Errorf("harness CPU: %w", err)
	}
	if p.bare != 0 {
		if out[3], err = cpuTicks(p.bare); err != nil {
			return fmt.Errorf("bare proxy CPU: %w", err)
		}
	}
	return nil
}

// rate is completed requests per second.
func (ph *phase) rate() float64 { return float64(ph.ok) / ph.elapsed.Seconds() }

// quantile returns the q-quantile of the samples (nearest rank).
func (ph *phase) quantile(q float64) time.Duration {
	if len(ph.samples) == 0 {
		return 0
	}
	i := int(q*float64(len(ph.samples))+0.5) - 1
	return ph.samples[min(max(i, 0), len(ph.samples)-1)]
}

// perRequest turns a CPU time in clock ticks into microseconds per
// completed request.
func (ph *phase) perRequest(ticks, hz int64) float64 {
	if ph.ok == 0 {
		return 0
	}
	return float64(ticks) * 1e6 / float64(hz) / float64(ph.ok)
}
