package openaisdk_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/sdk/openaisdk"
	"github.com/sluicehq/sluice/store/memstore"
)

// who pays for every call of the tests.
var who = sluice.Identity{Workspace: "w1", Key: "k1"}

var price = sluice.Price{Input: 150_000, Output: 600_000}

// prompt asks the mock for 7 output tokens; the mock reports ceil(len/4) input tokens.
const prompt = "Say hello to the limiter. [mock tokens=7]"

var promptTokens = int64(len(prompt)+3) / 4

func tokenBudget(limit int64) sluice.Rule {
	return sluice.Rule{Name: "daily_tokens", Kind: sluice.KindBudget, Subject: "workspace",
		Metric: sluice.MetricTokens, Limit: limit, Period: sluice.PeriodDay}
}

var costBudget = sluice.Rule{Name: "daily_cost", Kind: sluice.KindBudget, Subject: "workspace",
	Metric: sluice.MetricCost, Limit: 10_000_000, Period: sluice.PeriodDay}

// harness is a mock provider behind httptest, a Limiter, and an SDK client whose calls go
// through an outer recording middleware, then the Limiter's middleware.
type harness struct {
	mock   *mockprovider.Server
	srvURL string
	l      *sluice.Limiter
	client openai.Client

	mu       sync.Mutex
	statuses []int    // what the SDK got back per attempt, refusals included
	bodies   [][]byte // the request bodies the SDK sent, before the middleware
}

func newHarness(t *testing.T, mockOpts mockprovider.Options, rules []sluice.Rule, opts openaisdk.Options, clientOpts ...option.RequestOption) *harness {
	t.Helper()
	h := &harness{mock: mockprovider.New(mockOpts)}
	srv := httptest.NewServer(h.mock)
	t.Cleanup(srv.Close)
	h.srvURL = srv.URL
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	h.l = l
	if opts.Identity == nil {
		opts.Identity = func(*http.Request) sluice.Identity { return who }
	}
	if opts.Price == nil {
		opts.Price = func(string) sluice.Price { return price }
	}
	record := func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := next(r)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.bodies = append(h.bodies, body)
		if resp != nil {
			h.statuses = append(h.statuses, resp.StatusCode)
		}
		return resp, err
	}
	h.client = openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(srv.URL + "/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(2),
		option.WithMiddleware(record, openaisdk.Middleware(l, opts)),
	}, clientOpts...)...)
	return h
}

// used is the usage counted against rule for who.
func (h *harness) used(t *testing.T, rule string) int64 {
	t.Helper()
	all, err := h.l.Effective(context.Background(), who)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if e.Rule == rule {
			return e.Used
		}
	}
	t.Fatalf("no rule %q", rule)
	return 0
}

func (h *harness) attempts() ([]int, [][]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.statuses...), append([][]byte(nil), h.bodies...)
}

func chatParams(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     "mock-small",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		MaxTokens: openai.Int(100),
	}
}

// downOnce is a store whose first admission fails, as a store whose server blinked would.
type downOnce struct {
	*memstore.Store
	failed atomic.Bool
}

func (s *downOnce) Admit(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	if s.failed.CompareAndSwap(false, true) {
		return false, errors.New("connection refused")
	}
	return s.Store.Admit(ctx, now, b, results)
}
