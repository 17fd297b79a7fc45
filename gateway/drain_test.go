package gateway_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestGateway_DrainWhileRequestsArrive calls Drain over and over while
// requests come and go: it must neither panic nor return before the
// requests are done.
func TestGateway_DrainWhileRequestsArrive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				var req fasthttp.Request
				req.Header.SetMethod("POST")
				req.SetRequestURI("/v1/chat/completions")
				req.SetBodyString(`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`)
				req.Header.Set("Authorization", "Bearer "+testKey)
				var ctx fasthttp.RequestCtx
				ctx.Init(&req, nil, nil)
				h.gw.Handler(&ctx)
			}
		}()
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_ = h.gw.Drain(ctx)
		cancel()
	}
	stop.Store(true)
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.gw.Drain(ctx); err != nil {
		t.Fatalf("Drain with nothing in flight: %v", err)
	}
}
