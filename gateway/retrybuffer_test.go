package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/sluicehq/sluice"
)

// retryOnHint is what the official OpenAI Go SDK does against a rate rule
// refilling one call every 50 ms, with clients callers calling calls times
// each as fast as the rule lets them: how many of its retries (each made
// exactly on the hint, retry-after-ms) were refused again.
type retryOnHint struct {
	retries, refusedAgain int64
	failed                int64
}

func measureRetryOnHint(t testing.TB, buffer time.Duration, callers, calls int) retryOnHint {
	t.Helper()
	rule := sluice.Rule{Name: "rps", Kind: sluice.KindRate, Subject: "workspace", Limit: 20, Burst: 1, Window: time.Second}
	h := startHarness(t, setup{rules: []sluice.Rule{rule}, limiter: func(o *sluice.Options) { o.RetryAfterBuffer = buffer }})
	var m retryOnHint
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			c := openaiClient(h, option.WithMaxRetries(20), option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
				retry := r.Header.Get("X-Stainless-Retry-Count") != "0"
				resp, err := next(r)
				if retry {
					atomic.AddInt64(&m.retries, 1)
					if err == nil && resp.StatusCode == 429 {
						atomic.AddInt64(&m.refusedAgain, 1)
					}
				}
				return resp, err
			}))
			for range calls {
				if _, err := c.Chat.Completions.New(context.Background(), chatParams("hi [mock tokens=1]", 4)); err != nil {
					atomic.AddInt64(&m.failed, 1)
				}
			}
		})
	}
	wg.Wait()
	return m
}

// TestGateway_RetryOnTheHintIsAdmitted: with the default buffer, one
// client that retries exactly on the hint is not refused again.
func TestGateway_RetryOnTheHintIsAdmitted(t *testing.T) {
	t.Parallel()
	m := measureRetryOnHint(t, 0, 1, 20)
	if m.failed != 0 || m.retries == 0 {
		t.Fatalf("%+v", m)
	}
	if m.refusedAgain*10 > m.retries {
		t.Errorf("%d of %d retries on the hint refused again", m.refusedAgain, m.retries)
	}
}

// BenchmarkRetryAfterBuffer measures, per buffer and number of concurrent
// clients, the share of the OpenAI Go SDK's retries on the hint that are
// refused again (refused_again_%), as BENCHMARKS.md reports it.
func BenchmarkRetryAfterBuffer(b *testing.B) {
	for _, callers := range []int{1, 4} {
		for _, buffer := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
			b.Run(fmt.Sprintf("callers=%d/buffer=%v", callers, buffer), func(b *testing.B) {
				var total retryOnHint
				for b.Loop() {
					m := measureRetryOnHint(b, buffer, callers, 40/callers)
					total.retries += m.retries
					total.refusedAgain += m.refusedAgain
					total.failed += m.failed
				}
				b.ReportMetric(float64(total.retries), "retries")
				b.ReportMetric(100*float64(total.refusedAgain)/float64(max(total.retries, 1)), "refused_again_%")
				b.ReportMetric(float64(total.failed), "failed")
			})
		}
	}
}

// BenchmarkRetryAfterBufferNode is BenchmarkRetryAfterBuffer with the
// OpenAI and Anthropic Node SDKs (testdata/npmclients/retryonhint.mjs).
func BenchmarkRetryAfterBufferNode(b *testing.B) {
	dir, _ := filepath.Abs("testdata/npmclients")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		b.Fatalf("the npm clients are not installed: npm ci --prefix gateway/testdata/npmclients")
	}
	for _, client := range []string{"openai-node", "anthropic-node"} {
		for _, callers := range []int{1, 4} {
			for _, buffer := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
				b.Run(fmt.Sprintf("%s/callers=%d/buffer=%v", client, callers, buffer), func(b *testing.B) {
					var total retryOnHint
					for b.Loop() {
						rule := sluice.Rule{Name: "rps", Kind: sluice.KindRate, Subject: "workspace", Limit: 20, Burst: 1, Window: time.Second}
						h := startHarness(b, setup{rules: []sluice.Rule{rule}, limiter: func(o *sluice.Options) { o.RetryAfterBuffer = buffer }})
						cmd := exec.Command("node", "retryonhint.mjs", h.url, testKey, "mock-small", client, strconv.Itoa(callers), strconv.Itoa(40/callers))
						cmd.Dir = dir
						out, err := cmd.Output()
						if err != nil {
							b.Fatalf("node retryonhint.mjs: %v\n%s", err, out)
						}
						var m struct{ Retries, RefusedAgain, Failed int64 }
						if err := json.Unmarshal(out, &m); err != nil {
							b.Fatalf("%s: %v", out, err)
						}
						total.retries += m.Retries
						total.refusedAgain += m.RefusedAgain
						total.failed += m.Failed
					}
					b.ReportMetric(float64(total.retries), "retries")
					b.ReportMetric(100*float64(total.refusedAgain)/float64(max(total.retries, 1)), "refused_again_%")
					b.ReportMetric(float64(total.failed), "failed")
				})
			}
		}
	}
}
