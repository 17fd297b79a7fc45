package gateway_test

import (
	"context"
	"errors"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway"
)

// /readyz answers 503, naming the dependency, while a background check of
// it fails, and 200 again once it answers; the outage is logged once with
// its cause and once when it ends. /healthz stays 200.
func TestGateway_ReadyzFollowsDependencies(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	var failedChecks atomic.Int64
	var logs syncbuf.Buffer
	h := newHarness(t, nil, func(o *gateway.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		o.Dependencies = []gateway.Dependency{{Name: "store", Check: func(context.Context) error {
			if down.Load() {
				failedChecks.Add(1)
				return errors.New("dial tcp 10.0.0.7:6379: connection refused")
			}
			return nil
		}}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.gw.CheckDependencies(ctx, 10*time.Millisecond, time.Second)
	get := func(path string) (int, string) {
		resp, err := http.Get(h.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait := func(want int) string {
		deadline := time.Now().Add(5 * time.Second)
		for {
			status, body := get("/readyz")
			if status == want {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz stayed %d %s, want %d", status, body, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait(200)
	down.Store(true)
	body := wait(503)
	if !strings.Contains(body, `"store"`) || strings.Contains(body, "10.0.0.7") {
		t.Fatalf("/readyz body %s, want the dependency named and its error kept out", body)
	}
	if status, _ := get("/healthz"); status != 200 {
		t.Fatalf("/healthz %d while a dependency is down, want 200 (liveness)", status)
	}
	eventually(t, "several failed checks", func() bool { return failedChecks.Load() >= 5 })
	down.Store(false)
	wait(200)
	out := logs.String()
	if n := strings.Count(out, "dependency down"); n != 1 || !strings.Contains(out, "connection refused") || strings.Count(out, "dependency back") != 1 {
		t.Fatalf("log %q, want one line when down (with the cause) and one when back", out)
	}
}
