package anthropicsdk_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/mockprovider"
	llmanthropic "github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/sdk/anthropicsdk"
	"github.com/sluicehq/sluice/store/memstore"
)

// who pays for every call of the tests.
var who = sluice.Identity{Workspace: "w1", Key: "k1"}

var price = sluice.Price{Input: 3_000_000, Output: 15_000_000}

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
	l      *sluice.Limiter
	client anthropic.Client

	mu       sync.Mutex
	statuses []int    // what the SDK got back per attempt, refusals included
	bodies   [][]byte // the request bodies the SDK sent, before the middleware
}

func newHarness(t *testing.T, mockOpts mockprovider.Options, rules []sluice.Rule, opts anthropicsdk.Options, clientOpts ...option.RequestOption) *harness {
	t.Helper()
	h := &harness{mock: mockprovider.New(mockOpts)}
	srv := httptest.NewServer(h.mock)
	t.Cleanup(srv.Close)
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
	h.client = anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(srv.URL), option.WithAPIKey("sk-ant-test"), option.WithMaxRetries(2),
		option.WithMiddleware(record, anthropicsdk.Middleware(l, opts)),
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

func params(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "mock-large",
		MaxTokens: 100,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
	}
}

func TestMiddleware_SettlesReportedUsage(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		call func(t *testing.T, c anthropic.Client) anthropic.Usage
	}{
		{
			name: "message",
			call: func(t *testing.T, c anthropic.Client) anthropic.Usage {
				msg, err := c.Messages.New(ctx, params(prompt))
				if err != nil {
					t.Fatal(err)
				}
				return msg.Usage
			},
		},
		{
			name: "stream",
			call: func(t *testing.T, c anthropic.Client) anthropic.Usage {
				stream := c.Messages.NewStreaming(ctx, params(prompt))
				defer stream.Close()
				var acc anthropic.Message
				for stream.Next() {
					if err := acc.Accumulate(stream.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				return acc.Usage
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1_000_000), costBudget}, anthropicsdk.Options{})
			u := tt.call(t, h.client)
			if u.InputTokens != promptTokens || u.OutputTokens != 7 {
				t.Fatalf("the client saw %+v, want %d in and 7 out", u, promptTokens)
			}
			if got, want := h.used(t, "daily_tokens"), promptTokens+7; got != want {
				t.Fatalf("budget used %d tokens, want exactly the reported %d", got, want)
			}
			wantCost := price.Cost(sluice.Usage{InputTokens: promptTokens, OutputTokens: 7})
			if got := h.used(t, "daily_cost"); got != wantCost {
				t.Fatalf("cost budget used %d, want %d", got, wantCost)
			}
		})
	}
}

func TestMiddleware_SetsMaxTokensWhenAbsent(t *testing.T) {
	opts := anthropicsdk.Options{MaxOutputTokens: func(string) int64 { return 20 }}
	h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1_000_000)}, opts)
	msg, err := h.client.Messages.New(context.Background(), params("No directive here."), option.WithJSONDel("max_tokens"))
	if err != nil {
		t.Fatal(err)
	}
	// The mock answers exactly the cap it was sent.
	if msg.Usage.OutputTokens != 20 {
		t.Fatalf("output tokens %d, want the max_tokens 20 set by the middleware", msg.Usage.OutputTokens)
	}
	if _, bodies := h.attempts(); strings.Contains(string(bodies[0]), "max_tokens") {
		t.Fatalf("the SDK sent max_tokens after all: %s", bodies[0])
	}
}

func TestMiddleware_RateLimitedIsRetriedAfterRetryAfterMs(t *testing.T) {
	perWindow := sluice.Rule{Name: "per_window", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: 300 * time.Millisecond}
	h := newHarness(t, mockprovider.Options{}, []sluice.Rule{perWindow}, anthropicsdk.Options{})
	ctx := context.Background()
	if _, err := h.client.Messages.New(ctx, params(prompt)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := h.client.Messages.New(ctx, params(prompt)); err != nil {
		t.Fatalf("second call, after the SDK's retry: %v", err)
	}
	waited := time.Since(start)
	statuses, _ := h.attempts()
	if len(statuses) != 3 || statuses[1] != 429 || statuses[2] != 200 {
		t.Fatalf("statuses %v, want 200, 429, 200", statuses)
	}
	if waited < 250*time.Millisecond {
		t.Fatalf("the SDK retried after %v, before the retry-after-ms hint", waited)
	}
	if n := h.mock.Stats().Requests[mockprovider.RouteMessages]; n != 2 {
		t.Fatalf("the provider saw %d requests, want 2 (the refused attempt never left)", n)
	}
}

func TestMiddleware_TerminalRefusalsReachTheCallerOnce(t *testing.T) {
	tests := []struct {
		name    string
		rules   []sluice.Rule
		first   bool // a first call succeeds and uses up the rule
		status  int
		errType string
	}{
		{
			name:   "budget",
			rules:  []sluice.Rule{{Name: "tiny_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 1, Period: sluice.PeriodDay}},
			first:  true,
			status: 429, errType: "rate_limit_error",
		},
		{
			name:   "never fits",
			rules:  []sluice.Rule{tokenBudget(50)},
			status: 413, errType: "request_too_large",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, mockprovider.Options{}, tt.rules, anthropicsdk.Options{})
			ctx := context.Background()
			if tt.first {
				if _, err := h.client.Messages.New(ctx, params(prompt)); err != nil {
					t.Fatal(err)
				}
			}
			before := h.mock.Stats().Requests[mockprovider.RouteMessages]
			_, err := h.client.Messages.New(ctx, params(prompt))
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status {
				t.Fatalf("got %v, want an *anthropic.Error with status %d", err, tt.status)
			}
			if string(apiErr.Type()) != tt.errType || !strings.Contains(apiErr.Message, tt.rules[0].Name) {
				t.Fatalf("error type %q message %q, want %q naming %q", apiErr.Type(), apiErr.Message, tt.errType, tt.rules[0].Name)
			}
			if got := apiErr.Response.Header.Get("x-should-retry"); got != "false" {
				t.Fatalf("x-should-retry %q", got)
			}
			statuses, _ := h.attempts()
			if want := map[bool]int{true: 2, false: 1}[tt.first]; len(statuses) != want {
				t.Fatalf("the SDK made %d attempts (%v), want %d: a terminal refusal is never retried", len(statuses), statuses, want)
			}
			if n := h.mock.Stats().Requests[mockprovider.RouteMessages] - before; n != 0 {
				t.Fatalf("the provider saw %d requests for the refused call", n)
			}
		})
	}
}

func TestMiddleware_StreamEndedEarlyIsChargedWhatWasReceived(t *testing.T) {
	outputBudget := sluice.Rule{Name: "daily_output", Kind: sluice.KindBudget, Subject: "workspace",
		Metric: sluice.MetricOutputTokens, Limit: 1_000_000, Period: sluice.PeriodDay}
	tests := []struct {
		name   string
		prompt string
		// closeAfter closes the stream after that many text deltas; 0 reads to the end.
		closeAfter int
		deltas     int64
		wantErr    bool
	}{
		{name: "closed by the caller", prompt: "Count slowly. [mock tokens=50]", closeAfter: 3, deltas: 3},
		{name: "cut by the provider", prompt: "Count slowly. [mock tokens=50 cut=4]", deltas: 4, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, mockprovider.Options{ChunkInterval: time.Millisecond},
				[]sluice.Rule{tokenBudget(1_000_000), outputBudget}, anthropicsdk.Options{}, option.WithMaxRetries(0))
			stream := h.client.Messages.NewStreaming(context.Background(), params(tt.prompt))
			var received int64
			for stream.Next() {
				if ev := stream.Current(); ev.Type == "content_block_delta" {
					received++
				}
				if tt.closeAfter > 0 && received == int64(tt.closeAfter) {
					break
				}
			}
			if err := stream.Err(); (err != nil) != tt.wantErr {
				t.Fatalf("stream error %v, want one: %v", err, tt.wantErr)
			}
			if err := stream.Close(); err != nil {
				t.Fatal(err)
			}
			if received != tt.deltas {
				t.Fatalf("received %d deltas, want %d", received, tt.deltas)
			}
			if got := h.used(t, "daily_output"); got != received {
				t.Fatalf("output charged %d, want the %d deltas received", got, received)
			}
			// The input is the larger of the estimate and what message_start reported.
			_, bodies := h.attempts()
			bound, err := llmanthropic.ParseMessages(bodies[0])
			if err != nil {
				t.Fatal(err)
			}
			in := max(bound.InputTokens, int64(len(tt.prompt)+3)/4)
			if got, want := h.used(t, "daily_tokens"), in+received; got != want {
				t.Fatalf("tokens charged %d, want input %d and the output received %d", got, in, received)
			}
		})
	}
}

func TestMiddleware_ProviderErrorsReleaseTheReservation(t *testing.T) {
	for _, status := range []int{400, 529} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			inFlight := sluice.Rule{Name: "in_flight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1}
			h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1_000_000), inFlight}, anthropicsdk.Options{},
				option.WithMaxRetries(1))
			_, err := h.client.Messages.New(context.Background(), params("[mock status="+strconv.Itoa(status)+"]"))
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != status {
				t.Fatalf("got %v, want the provider's %d", err, status)
			}
			if got := h.used(t, "daily_tokens"); got != 0 {
				t.Fatalf("budget used %d after the provider refused, want 0", got)
			}
			if got := h.used(t, "in_flight"); got != 0 {
				t.Fatalf("%d calls still in flight", got)
			}
		})
	}
}

func TestMiddleware_OtherRequestsPassThrough(t *testing.T) {
	h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1)}, anthropicsdk.Options{})
	page, err := h.client.Models.List(context.Background(), anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) == 0 {
		t.Fatal("no models listed")
	}
	if st := h.l.Stats(); st.Admitted != 0 || st.Refused != 0 {
		t.Fatalf("limiter stats %+v: a models list is not a model call", st)
	}
}
