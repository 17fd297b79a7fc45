package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

const (
	smallChat     = `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hi [mock tokens=2]"}]}`
	smallMessages = `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hi [mock tokens=2]"}]}`
)

// nextUTCMidnight is when a daily budget in UTC resets.
func nextUTCMidnight() time.Time {
	return time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
}

// checkLimitHeaders checks the X-RateLimit-* and IETF RateLimit fields
// name rule with limit and remaining, and a reset within maxReset.
func checkLimitHeaders(t *testing.T, r reply, rule string, limit, remaining int64, maxReset time.Duration) {
	t.Helper()
	h := r.header
	if h.Get("X-RateLimit-Limit") != strconv.FormatInt(limit, 10) || h.Get("X-RateLimit-Remaining") != strconv.FormatInt(remaining, 10) {
		t.Errorf("X-RateLimit-Limit %q, -Remaining %q, want %d and %d", h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), limit, remaining)
	}
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil || reset < 0 || time.Duration(reset)*time.Second > maxReset+time.Second {
		t.Errorf("X-RateLimit-Reset %q, want seconds up to %v", h.Get("X-RateLimit-Reset"), maxReset)
	}
	q := strconv.Quote(rule)
	// The policy's quota, then its unit and window (draft-11 §3.1).
	if want := q + ";q=" + strconv.FormatInt(limit, 10); h.Get("RateLimit-Policy") != want && !strings.HasPrefix(h.Get("RateLimit-Policy"), want+";") {
		t.Errorf("RateLimit-Policy %q, want %q and its parameters", h.Get("RateLimit-Policy"), want)
	}
	if want := q + ";r=" + strconv.FormatInt(remaining, 10) + ";t=" + h.Get("X-RateLimit-Reset"); h.Get("RateLimit") != want {
		t.Errorf("RateLimit %q, want %q", h.Get("RateLimit"), want)
	}
}

// checkRetryHint checks Retry-After is retry-after-ms in whole seconds,
// rounded up, that the body's retry_after_ms agrees, and returns the hint.
func checkRetryHint(t *testing.T, r reply, l *limitObject, max time.Duration) time.Duration {
	t.Helper()
	ms, err := strconv.ParseInt(r.header.Get("retry-after-ms"), 10, 64)
	if err != nil || ms <= 0 || time.Duration(ms)*time.Millisecond > max {
		t.Fatalf("retry-after-ms %q, want 1..%d", r.header.Get("retry-after-ms"), max.Milliseconds())
	}
	if want := strconv.FormatInt((ms+999)/1000, 10); r.header.Get("Retry-After") != want {
		t.Errorf("Retry-After %q, want %s (retry-after-ms %d rounded up)", r.header.Get("Retry-After"), want, ms)
	}
	if r.header.Get("x-should-retry") == "false" {
		t.Error("a retryable refusal says x-should-retry: false")
	}
	if l.RetryAfterMS != ms {
		t.Errorf("body retry_after_ms %d, header %d", l.RetryAfterMS, ms)
	}
	return time.Duration(ms) * time.Millisecond
}

func TestGateway_RateLimitRefusal(t *testing.T) {
	t.Parallel()
	rule := sluice.Rule{Name: "per_key_rate", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: 10 * time.Second}
	h := newHarness(t, []sluice.Rule{rule})
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		t.Run(path, func(t *testing.T) {
			before := h.mockCalls()
			r := h.post(path, smallChat, nil)
			if r.status != 429 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			var e errorReply
			if path == "/v1/messages" {
				e = anthropicError(t, r)
				if e.Error.Type != "rate_limit_error" {
					t.Errorf("type %q", e.Error.Type)
				}
			} else {
				e = openaiError(t, r)
				if e.Error.Type != "rate_limit_error" || deref(e.Error.Code) != "rate_limit_exceeded" {
					t.Errorf("type %q code %q", e.Error.Type, deref(e.Error.Code))
				}
			}
			l := e.Error.Limit
			if l == nil {
				t.Fatalf("no limit object: %s", r.body)
			}
			if l.Rule != "per_key_rate" || l.Subject != "key" || l.Metric != "requests" || l.Limit != 1 || l.Used != 1 || l.Remaining != 0 {
				t.Errorf("limit %+v", *l)
			}
			reset, err := time.Parse(time.RFC3339, l.ResetAt)
			if err != nil || reset.Before(time.Now().Add(-time.Second)) || reset.After(time.Now().Add(11*time.Second)) {
				t.Errorf("reset_at %q, want within the window", l.ResetAt)
			}
			wait := checkRetryHint(t, r, l, 10*time.Second)
			if wait < 9*time.Second {
				t.Errorf("retry hint %v for a bucket refilling one request per 10s", wait)
			}
			if !strings.Contains(e.Error.Message, "per_key_rate") {
				t.Errorf("message %q does not name the limit", e.Error.Message)
			}
			checkLimitHeaders(t, r, "per_key_rate", 1, 0, 10*time.Second)
			if h.mockCalls() != before {
				t.Error("a refused call reached the provider")
			}
		})
	}
}

func TestGateway_BusyRefusal(t *testing.T) {
	t.Parallel()
	rule := sluice.Rule{Name: "one_at_a_time", Kind: sluice.KindConcurrency, Subject: "workspace", Limit: 1}
	// Chunks every 10ms, 2000 of them: the stream stays open until the test
	// lets go of it.
	h := startHarness(t, setup{rules: []sluice.Rule{rule}, mock: mockOptions(10 * time.Millisecond)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := openaiClient(h)
	stream := client.Chat.Completions.NewStreaming(ctx, chatParams("hold the slot", 2000))
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	r := h.post("/v1/chat/completions", smallChat, nil)
	if r.status != 429 {
		t.Fatalf("status %d with a stream in flight: %s", r.status, r.body)
	}
	e := openaiError(t, r)
	if e.Error.Type != "rate_limit_error" || deref(e.Error.Code) != "concurrency_limit_exceeded" || e.Error.Limit == nil {
		t.Fatalf("body %s", r.body)
	}
	if l := e.Error.Limit; l.Rule != "one_at_a_time" || l.Metric != "concurrency" || l.Limit != 1 || l.Used != 1 || l.Remaining != 0 {
		t.Errorf("limit %+v", *l)
	}
	checkRetryHint(t, r, e.Error.Limit, time.Second)
	if r.header.Get("X-RateLimit-Limit") != "1" || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("X-RateLimit headers %v", r.header)
	}
	ra := anthropicError(t, h.post("/v1/messages", smallMessages, nil))
	if ra.Error.Type != "rate_limit_error" || ra.Error.Limit == nil || ra.Error.Limit.Rule != "one_at_a_time" {
		t.Errorf("Anthropic shape: %+v", ra)
	}
	// Letting go of the stream frees the slot.
	cancel()
	_ = stream.Close()
	eventually(t, "the slot to be freed", func() bool { return h.used("one_at_a_time") == 0 })
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("after the stream: %d %s", r.status, r.body)
	}
}

func TestGateway_BudgetRefusal(t *testing.T) {
	t.Parallel()
	rule := sluice.Rule{Name: "one_a_day", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{rule})
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	midnight := nextUTCMidnight()
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		t.Run(path, func(t *testing.T) {
			r := h.post(path, smallChat, nil)
			if r.status != 429 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if r.header.Get("x-should-retry") != "false" || r.header.Get("Retry-After") != "" || r.header.Get("retry-after-ms") != "" {
				t.Errorf("retry signals %v: want x-should-retry: false and no Retry-After", r.header)
			}
			var e errorReply
			if path == "/v1/messages" {
				e = anthropicError(t, r)
			} else {
				e = openaiError(t, r)
				if e.Error.Type != "budget_exceeded" || deref(e.Error.Code) != "budget_exceeded" {
					t.Errorf("type %q code %q", e.Error.Type, deref(e.Error.Code))
				}
			}
			l := e.Error.Limit
			if l == nil || l.Rule != "one_a_day" || l.Subject != "workspace" || l.Metric != "requests" || l.Limit != 1 || l.Used != 1 || l.Remaining != 0 || l.RetryAfterMS != 0 {
				t.Fatalf("limit %s", r.body)
			}
			if l.ResetAt != midnight.Format(time.RFC3339) {
				t.Errorf("reset_at %q, want %s", l.ResetAt, midnight.Format(time.RFC3339))
			}
			if !strings.Contains(e.Error.Message, "one_a_day") || !strings.Contains(e.Error.Message, midnight.Format(time.RFC3339)) {
				t.Errorf("message %q should name the budget and its reset", e.Error.Message)
			}
			checkLimitHeaders(t, r, "one_a_day", 1, 0, time.Until(midnight))
		})
	}
	if h.mockCalls() != 1 {
		t.Errorf("the provider received %d calls, want 1", h.mockCalls())
	}
}

func TestGateway_NeverFits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		rule sluice.Rule
	}{
		{"Budget", sluice.Rule{Name: "small_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 500, Period: sluice.PeriodDay}},
		{"OutputBudget", sluice.Rule{Name: "small_budget", Kind: sluice.KindBudget, Subject: "user", Metric: sluice.MetricOutputTokens, Limit: 500, Period: sluice.PeriodMonth}},
		{"CostBudget", sluice.Rule{Name: "small_budget", Kind: sluice.KindBudget, Subject: "org", Metric: sluice.MetricCost, Limit: 100, Period: sluice.PeriodDay}},
		{"Bucket", sluice.Rule{Name: "small_budget", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: 500, Window: time.Minute}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, []sluice.Rule{c.rule})
			for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
				// 1000 output tokens at $0.60 per million is 600 micro-dollars.
				r := h.post(path, `{"model":"mock-small","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`, nil)
				if r.status != 413 {
					t.Fatalf("%s: status %d: %s", path, r.status, r.body)
				}
				if r.header.Get("x-should-retry") != "false" || r.header.Get("Retry-After") != "" {
					t.Errorf("%s: retry signals %v", path, r.header)
				}
				var e errorReply
				if path == "/v1/messages" {
					e = anthropicError(t, r)
					if e.Error.Type != "request_too_large" {
						t.Errorf("type %q", e.Error.Type)
					}
				} else {
					e = openaiError(t, r)
					if deref(e.Error.Code) != "request_too_large" {
						t.Errorf("code %q", deref(e.Error.Code))
					}
				}
				// The estimate is what the request asked (requested), not
				// usage; the subject is named.
				if l := e.Error.Limit; l == nil || l.Rule != "small_budget" || l.Limit != c.rule.Limit || l.Requested <= c.rule.Limit || l.Used != 0 || l.Subject == "" {
					t.Errorf("%s: limit object %s", path, r.body)
				}
			}
			// The same request with a cap that fits is admitted.
			if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
				t.Fatalf("a request that fits: %d %s", r.status, r.body)
			}
			if h.mockCalls() != 1 {
				t.Errorf("the provider received %d calls, want 1", h.mockCalls())
			}
		})
	}
}

// downStore is a store whose admissions fail, as a store past its timeout.
type downStore struct{ sluice.Store }

func (downStore) Admit(context.Context, time.Time, sluice.Batch, []sluice.ChargeResult) (bool, error) {
	return false, errors.New("dial tcp 10.0.0.1:6379: i/o timeout")
}

// peekCountingStore is downStore that also counts the reads made without
// charging (Peek), which the rate-limit fields of a refusal would make.
type peekCountingStore struct {
	downStore
	peeks atomic.Int64
}

func (s *peekCountingStore) Peek(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) error {
	s.peeks.Add(1)
	return s.downStore.Peek(ctx, now, b, results)
}

// A 503 of a store that does not answer is sent at once: the rate-limit
// fields the gateway's own refusals carry (withRoom) are not read from the
// store that just failed.
func TestGateway_StoreUnavailableAskedOnce(t *testing.T) {
	t.Parallel()
	store := &peekCountingStore{downStore: downStore{memstore.New(memstore.Options{})}}
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, store: store})
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 503 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if n := store.peeks.Load(); n != 0 {
		t.Errorf("the store that failed the admission was read %d more times for the answer's rate-limit fields", n)
	}
}

func TestGateway_StoreUnavailable(t *testing.T) {
	t.Parallel()
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, store: downStore{memstore.New(memstore.Options{})}})
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		r := h.post(path, smallChat, nil)
		if r.status != 503 || r.header.Get("Retry-After") != "1" {
			t.Fatalf("%s: status %d, Retry-After %q: %s", path, r.status, r.header.Get("Retry-After"), r.body)
		}
		if r.header.Get("x-should-retry") == "false" {
			t.Errorf("%s: a transient failure said x-should-retry: false", path)
		}
		if path == "/v1/messages" {
			if e := anthropicError(t, r); e.Error.Type != "api_error" {
				t.Errorf("type %q", e.Error.Type)
			}
		} else if e := openaiError(t, r); deref(e.Error.Code) != "store_unavailable" || e.Error.Type != "server_error" {
			t.Errorf("body %s", r.body)
		}
		if strings.Contains(string(r.body), "10.0.0.1") {
			t.Errorf("the store's address leaked to the client: %s", r.body)
		}
	}
	if h.mockCalls() != 0 {
		t.Errorf("the provider was called %d times with the store down", h.mockCalls())
	}
}

func TestGateway_StoreUnavailableFailsOpenWhenEveryRuleSaysSo(t *testing.T) {
	t.Parallel()
	open := dailyTokens
	open.OnStoreError = sluice.StoreErrorOpen
	h := startHarness(t, setup{rules: []sluice.Rule{open}, store: downStore{memstore.New(memstore.Options{})}})
	r := h.post("/v1/chat/completions", smallChat, nil)
	if r.status != 200 || r.header.Get("X-Sluice-Fail-Open") != "true" {
		t.Fatalf("status %d, X-Sluice-Fail-Open %q: %s", r.status, r.header.Get("X-Sluice-Fail-Open"), r.body)
	}
	if h.mockCalls() != 1 {
		t.Fatalf("the provider was called %d times, want 1", h.mockCalls())
	}
}

func TestGateway_RateLimitHeaders(t *testing.T) {
	t.Parallel()
	rate := sluice.Rule{Name: "rate", Kind: sluice.KindRate, Subject: "key", Limit: 4, Window: time.Hour}
	budget := sluice.Rule{Name: "budget", Kind: sluice.KindBudget, Subject: "workspace", Limit: 10, Period: sluice.PeriodDay}
	cases := []struct {
		name  string
		rules []sluice.Rule
		// want is the rule with least room after each of three calls, its
		// limit and remaining.
		want      []string
		limit     int64
		remaining []int64
	}{
		// After one call the rate has 3/4 left and the budget 9/10: rate.
		{"RateHasLeastRoom", []sluice.Rule{rate, budget}, []string{"rate", "rate", "rate"}, 4, []int64{3, 2, 1}},
		{"BudgetHasLeastRoom", []sluice.Rule{{Name: "rate", Kind: sluice.KindRate, Subject: "key", Limit: 100, Window: time.Hour}, budget},
			[]string{"budget", "budget", "budget"}, 10, []int64{9, 8, 7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.rules)
			for i := range c.want {
				r := h.post("/v1/chat/completions", smallChat, nil)
				if r.status != 200 {
					t.Fatalf("call %d: %d %s", i, r.status, r.body)
				}
				maxReset := time.Hour
				if c.want[i] == "budget" {
					maxReset = time.Until(nextUTCMidnight())
				}
				checkLimitHeaders(t, r, c.want[i], c.limit, c.remaining[i], maxReset)
			}
		})
	}
	t.Run("Streaming", func(t *testing.T) {
		h := newHarness(t, []sluice.Rule{rate})
		r := h.post("/v1/chat/completions", `{"model":"mock-small","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%d %v", r.status, r.header)
		}
		checkLimitHeaders(t, r, "rate", 4, 3, time.Hour)
	})
	t.Run("NoRules", func(t *testing.T) {
		h := newHarness(t, nil)
		r := h.post("/v1/chat/completions", smallChat, nil)
		if r.status != 200 || r.header.Get("X-Sluice-Model") != "mock-small" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})
}

func TestGateway_BudgetWarning(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "warned", Kind: sluice.KindBudget, Subject: "workspace", Limit: 10, Period: sluice.PeriodDay, WarnAt: []float64{0.2, 0.5}},
		{Name: "soft", Kind: sluice.KindBudget, Subject: "user", Limit: 10, SoftLimit: 3, Period: sluice.PeriodDay},
	}
	h := newHarness(t, rules)
	want := [][]string{
		nil,
		{"warned; used=2; limit=10; threshold=0.2"},
		{"warned; used=3; limit=10; threshold=0.2", "soft; used=3; limit=10; soft"},
		{"warned; used=4; limit=10; threshold=0.2", "soft; used=4; limit=10; soft"},
		{"warned; used=5; limit=10; threshold=0.5", "soft; used=5; limit=10; soft"},
	}
	for i, w := range want {
		r := h.post("/v1/chat/completions", smallChat, nil)
		if r.status != 200 {
			t.Fatalf("call %d: %d %s", i+1, r.status, r.body)
		}
		got := r.header.Values("X-Sluice-Budget-Warning")
		if strings.Join(got, "|") != strings.Join(w, "|") {
			t.Errorf("call %d: X-Sluice-Budget-Warning %q, want %q", i+1, got, w)
		}
	}
}

func TestGateway_ModelHeader(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cases := []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"small","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "mock-small"},
		{"/v1/chat/completions", `{"model":"mock-large","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "mock-large"},
		{"/v1/responses", `{"model":"small","max_output_tokens":16,"input":"hi"}`, "mock-small"},
		{"/v1/embeddings", `{"model":"small","input":"hi"}`, "mock-small"},
		{"/v1/messages", `{"model":"small","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "mock-small"},
	}
	for _, c := range cases {
		r := h.post(c.path, c.body, nil)
		if r.status != 200 || r.header.Get("X-Sluice-Model") != c.want {
			t.Errorf("%s %s: status %d, X-Sluice-Model %q, want %q: %s", c.path, c.body, r.status, r.header.Get("X-Sluice-Model"), c.want, r.body)
		}
		if r.header.Get("X-Sluice-Output-Cap") != "" {
			t.Errorf("%s: X-Sluice-Output-Cap without a clamp", c.path)
		}
	}
}

func TestSDK_AnthropicBudgetExhaustedReachesSDKOnce(t *testing.T) {
	t.Parallel()
	tiny := sluice.Rule{Name: "tiny_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 1, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{tiny})
	calls := 0
	c := anthropicClient(h, anthropicoption.WithMaxRetries(3), anthropicoption.WithMiddleware(func(r *http.Request, next anthropicoption.MiddlewareNext) (*http.Response, error) {
		calls++
		return next(r)
	}))
	params := anthropic.MessageNewParams{Model: "mock-small", MaxTokens: 5,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	if _, err := c.Messages.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	_, err := c.Messages.New(context.Background(), params)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("got %v, want a 429", err)
	}
	if calls != 2 {
		t.Fatalf("the SDK sent %d requests, want 2 (the budget refusal never retried)", calls)
	}
	midnight := nextUTCMidnight().Format(time.RFC3339)
	if raw := apiErr.RawJSON(); !strings.Contains(raw, "tiny_budget") || !strings.Contains(raw, midnight) {
		t.Fatalf("error %s should name the budget and its reset %s", raw, midnight)
	}
	if h.mockCalls() != 1 {
		t.Fatalf("the provider received %d calls", h.mockCalls())
	}
}
