package retry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/retry"
)

// fakeClock records every wait and lets it pass at once, moving its time on.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waits = append(c.waits, d)
	fired := make(chan time.Time, 1)
	fired <- c.now
	return fired
}

func (c *fakeClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// reply is one scripted response of a fake server.
type reply struct {
	status int
	header http.Header
	body   string
}

// scriptedServer answers each request with the next reply, repeating the
// last one, and counts requests.
func scriptedServer(t *testing.T, replies ...reply) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var count atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(count.Add(1))
		rep := replies[min(n, len(replies))-1]
		for k, vs := range rep.header {
			w.Header()[k] = vs
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(srv.Close)
	return srv, &count
}

// get returns a call for Do that GETs url.
func get(url string) func(ctx context.Context) (*http.Response, error) {
	return func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		return http.DefaultClient.Do(req)
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(body)
}

func TestDo_ThrottledWaitsExactlyTheHint(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"retry-after-ms first", header("retry-after-ms", "1500", "Retry-After", "2"), 1500 * time.Millisecond},
		{"Retry-After seconds", header("Retry-After", "7"), 7 * time.Second},
		{"Retry-After date", header("Retry-After", epoch.Add(12*time.Second).Format(http.TimeFormat)), 12 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, count := scriptedServer(t, reply{429, tt.header, rateLimitBody}, reply{200, nil, `{"ok":true}`})
			clock := newFakeClock()
			resp, err := retry.Do(t.Context(), retry.Policy{Clock: clock, Jitter: noJitter}, get(srv.URL))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.StatusCode != 200 || readBody(t, resp) != `{"ok":true}` {
				t.Fatalf("Do returned status %d, want 200", resp.StatusCode)
			}
			if got := clock.Waits(); len(got) != 1 || got[0] != tt.want {
				t.Fatalf("waits = %v, want [%v]", got, tt.want)
			}
			if count.Load() != 2 {
				t.Fatalf("%d requests, want 2", count.Load())
			}
		})
	}
}

func TestDo_TerminalIsTriedOnce(t *testing.T) {
	sluiceBudget := `{"error":{"message":"daily token budget reached; resets at 2026-09-21T00:00:00Z","type":"budget_exceeded","code":"budget_exceeded"},"limit":{"rule":"daily-tokens","reset_at":"2026-09-21T00:00:00Z"}}`
	tests := []struct {
		name  string
		reply reply
	}{
		{"sluice budget 429 with x-should-retry false", reply{429, header("x-should-retry", "false"), sluiceBudget}},
		{"openai insufficient_quota", reply{429, nil, insufficientQuotaBody}},
		{"never fits", reply{413, header("x-should-retry", "false"), `{"error":{"type":"too_large"}}`}},
		{"bad key", reply{401, nil, `{"error":{"type":"invalid_api_key"}}`}},
		{"hint past MaxHint", reply{429, header("Retry-After", "3600"), rateLimitBody}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, count := scriptedServer(t, tt.reply, reply{200, nil, "{}"})
			clock := newFakeClock()
			resp, err := retry.Do(t.Context(), retry.Policy{Clock: clock}, get(srv.URL))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.StatusCode != tt.reply.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.reply.status)
			}
			if got := readBody(t, resp); got != tt.reply.body {
				t.Fatalf("body %q, want the refusal %q", got, tt.reply.body)
			}
			if count.Load() != 1 || len(clock.Waits()) != 0 {
				t.Fatalf("%d requests and waits %v, want 1 request and no wait", count.Load(), clock.Waits())
			}
		})
	}
}

func TestDo_TransientBackoffIsBoundedAndJittered(t *testing.T) {
	srv, count := scriptedServer(t, reply{502, nil, "bad gateway"})
	clock := newFakeClock()
	var retries []retry.Decision
	p := retry.Policy{
		MaxAttempts: 6,
		BaseDelay:   100 * time.Millisecond,
		MaxDelay:    400 * time.Millisecond,
		Clock:       clock,
		OnRetry:     func(_ int, d retry.Decision, _ time.Duration) { retries = append(retries, d) },
	}
	resp, err := retry.Do(t.Context(), p, get(srv.URL))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if resp.StatusCode != 502 || readBody(t, resp) != "bad gateway" {
		t.Fatalf("last response: status %d, want the last 502 with its body", resp.StatusCode)
	}
	if count.Load() != 6 {
		t.Fatalf("%d requests, want MaxAttempts = 6", count.Load())
	}
	caps := []time.Duration{100, 200, 400, 400, 400}
	waits := clock.Waits()
	if len(waits) != len(caps) || len(retries) != len(caps) {
		t.Fatalf("waits %v and %d retries, want %d", waits, len(retries), len(caps))
	}
	for i, wait := range waits {
		if limit := caps[i] * time.Millisecond; wait < 0 || wait > limit {
			t.Errorf("wait %d = %v, want within [0, %v]", i+1, wait, limit)
		}
		if retries[i].Class != retry.Transient {
			t.Errorf("retry %d classified %v, want transient", i+1, retries[i].Class)
		}
	}
}

// closeTracker is a response body that records being closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeTracker) Close() error { b.closed.Store(true); return nil }

func TestDo_AttemptsCappedAndDiscardedBodiesClosed(t *testing.T) {
	var bodies []*closeTracker
	call := func(context.Context) (*http.Response, error) {
		body := &closeTracker{Reader: strings.NewReader("unavailable")}
		bodies = append(bodies, body)
		return &http.Response{StatusCode: 503, Header: header("Retry-After", "1"), Body: body}, nil
	}
	clock := newFakeClock()
	resp, err := retry.Do(t.Context(), retry.Policy{MaxAttempts: 3, Clock: clock, Jitter: noJitter}, call)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("Do = %v, %v; want the last 503", resp, err)
	}
	if len(bodies) != 3 {
		t.Fatalf("%d attempts, want 3", len(bodies))
	}
	for i, body := range bodies[:2] {
		if !body.closed.Load() {
			t.Errorf("discarded body %d not closed", i+1)
		}
	}
	if bodies[2].closed.Load() || resp.Body != bodies[2] {
		t.Errorf("the returned body must be the last one, open")
	}
	if got := clock.Waits(); len(got) != 2 || got[0] != time.Second || got[1] != time.Second {
		t.Errorf("waits = %v, want the 503's Retry-After twice", got)
	}
}

func TestDo_ConnectionErrorsAreRetried(t *testing.T) {
	url := "http://" + testenv.RefusedAddr(t) // held, so no other test can listen there
	clock := newFakeClock()
	calls := 0
	resp, err := retry.Do(t.Context(), retry.Policy{Clock: clock}, func(ctx context.Context) (*http.Response, error) {
		calls++
		return get(url)(ctx)
	})
	if err == nil || resp != nil {
		t.Fatalf("Do = %v, %v; want the connection error", resp, err)
	}
	if calls != 4 || len(clock.Waits()) != 3 {
		t.Fatalf("%d calls, %d waits; want 4 calls, 3 waits", calls, len(clock.Waits()))
	}
}

func TestDo_ContextCancelStopsWaiting(t *testing.T) {
	srv, count := scriptedServer(t, reply{429, header("Retry-After", "30"), rateLimitBody}, reply{200, nil, "{}"})
	ctx, cancel := context.WithCancel(t.Context())
	waiting := make(chan struct{})
	// The real clock: the wait is 30 seconds, and only cancellation ends it.
	p := retry.Policy{OnRetry: func(int, retry.Decision, time.Duration) { close(waiting) }}
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := retry.Do(ctx, p, get(srv.URL))
		done <- result{resp, err}
	}()
	<-waiting
	cancel()
	got := <-done
	if got.resp != nil || !errors.Is(got.err, context.Canceled) {
		t.Fatalf("Do = %v, %v; want no response and context.Canceled", got.resp, got.err)
	}
	if count.Load() != 1 {
		t.Fatalf("%d requests, want 1", count.Load())
	}
}

func TestDo_WaitPastDeadlineGivesUpAtOnce(t *testing.T) {
	srv, count := scriptedServer(t, reply{429, header("retry-after-ms", "7200000"), rateLimitBody}, reply{200, nil, "{}"})
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	clock := newFakeClock()
	resp, err := retry.Do(ctx, retry.Policy{MaxHint: 3 * time.Hour, Clock: clock}, get(srv.URL))
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("Do = %v, %v; want the 429 back", resp, err)
	}
	resp.Body.Close()
	if count.Load() != 1 || len(clock.Waits()) != 0 {
		t.Fatalf("%d requests, waits %v; want 1 request and no wait", count.Load(), clock.Waits())
	}
}

func TestDo_CancelledCallReturnsItsOwnResult(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	resp, err := retry.Do(ctx, retry.Policy{Clock: newFakeClock()}, func(context.Context) (*http.Response, error) {
		calls++
		cancel()
		return nil, context.Canceled
	})
	if resp != nil || !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("Do = %v, %v after %d calls; want context.Canceled after 1", resp, err, calls)
	}
}
