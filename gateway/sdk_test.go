package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

var dailyTokens = sluice.Rule{Name: "daily_tokens", Kind: sluice.KindBudget, Subject: "workspace",
	Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}

func openaiClient(h *harness, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(h.url + "/v1"), option.WithAPIKey(testKey)}, opts...)...)
}

func anthropicClient(h *harness, opts ...anthropicoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]anthropicoption.RequestOption{anthropicoption.WithBaseURL(h.url), anthropicoption.WithAPIKey(testKey)}, opts...)...)
}

// prompt is 40 bytes: the mock reports 10 input tokens.
const prompt = "Say hello to the gateway. [mock tokens=7]"

func TestSDK_OpenAIChatSettlesReportedUsage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens})
	c := openaiClient(h)
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "mock-small",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(100),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	if resp.Usage.CompletionTokens != 7 || want == 0 {
		t.Fatalf("usage %+v, want 7 completion tokens", resp.Usage)
	}
	rec := h.rec.waitUsage(t, 1)[0] // settled once the answer is sent
	if got := h.used("daily_tokens"); got != want {
		t.Fatalf("budget used %d, want exactly the reported %d", got, want)
	}
	if rec.Workspace != "w1" || rec.Route != "chat" || rec.Model != "mock-small" || rec.OutputTokens != 7 {
		t.Fatalf("ledger record %+v", rec)
	}
	if rec.Cost != (sluice.Price{Input: 150_000, Output: 600_000}).Cost(sluice.Usage{InputTokens: resp.Usage.PromptTokens, OutputTokens: 7}) {
		t.Fatalf("ledger cost %d", rec.Cost)
	}
}

func TestSDK_OpenAIChatStreamSettlesAndHidesInjectedUsage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens})
	c := openaiClient(h)
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "mock-small",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	var text strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		if chunk.Usage.TotalTokens != 0 || chunk.JSON.Usage.Valid() {
			t.Fatalf("client saw a usage it did not ask for: %s", chunk.RawJSON())
		}
		for _, ch := range chunk.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.Len() == 0 {
		t.Fatal("no content streamed")
	}
	rec := h.rec.waitUsage(t, 1)[0]
	if rec.OutputTokens != 7 || rec.InputTokens != 11 {
		t.Fatalf("settled %+v, want 11 in and 7 out as the mock reported", rec)
	}
	if got := h.used("daily_tokens"); got != 18 {
		t.Fatalf("budget used %d, want 18", got)
	}
}

func TestSDK_OpenAIResponsesStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens})
	c := openaiClient(h)
	stream := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "mock-large",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
	})
	var usage responses.ResponseUsage
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			usage = ev.Response.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	rec := h.rec.waitUsage(t, 1)[0]
	if usage.OutputTokens != 7 || rec.OutputTokens != usage.OutputTokens || rec.InputTokens != usage.InputTokens {
		t.Fatalf("client saw %+v, ledger %+v", usage, rec)
	}
}

func TestSDK_AnthropicMessagesAndStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens})
	c := anthropicClient(h)
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model:     "mock-large",
		MaxTokens: 50,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if msg.Usage.OutputTokens != 7 {
		t.Fatalf("usage %+v", msg.Usage)
	}
	stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model:     "mock-large",
		MaxTokens: 50,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	})
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	recs := h.rec.waitUsage(t, 2)
	total := int64(0)
	for _, r := range recs {
		if r.Route != "messages" || r.OutputTokens != 7 {
			t.Fatalf("ledger %+v", r)
		}
		total += r.InputTokens + r.OutputTokens
	}
	if got := h.used("daily_tokens"); got != total || acc.Usage.OutputTokens != 7 {
		t.Fatalf("budget used %d, want %d; stream usage %+v", got, total, acc.Usage)
	}
}

func TestSDK_RateLimitedIsRetriedAfterRetryAfter(t *testing.T) {
	t.Parallel()
	rps := sluice.Rule{Name: "per_second", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: 300 * time.Millisecond}
	h := newHarness(t, []sluice.Rule{rps})
	var statuses []int
	c := openaiClient(h, option.WithMaxRetries(3), option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if resp != nil {
			statuses = append(statuses, resp.StatusCode)
		}
		return resp, err
	}))
	params := openai.ChatCompletionNewParams{Model: "mock-small", MaxTokens: openai.Int(5),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	if _, err := c.Chat.Completions.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Chat.Completions.New(context.Background(), params); err != nil {
		t.Fatalf("second call, after the SDK's retry: %v", err)
	}
	if len(statuses) != 3 || statuses[1] != 429 || statuses[2] != 200 {
		t.Fatalf("statuses %v, want 200, 429, 200", statuses)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("the SDK retried after %v, before the Retry-After hint", waited)
	}
}

func TestSDK_BudgetExhaustedReachesSDKOnce(t *testing.T) {
	t.Parallel()
	tiny := sluice.Rule{Name: "tiny_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 1, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{tiny})
	calls := 0
	c := openaiClient(h, option.WithMaxRetries(3), option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		calls++
		return next(r)
	}))
	params := openai.ChatCompletionNewParams{Model: "mock-small", MaxTokens: openai.Int(5),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	if _, err := c.Chat.Completions.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	_, err := c.Chat.Completions.New(context.Background(), params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("got %v, want a 429", err)
	}
	if calls != 2 {
		t.Fatalf("the SDK sent %d requests, want 2 (the budget refusal never retried)", calls)
	}
	tomorrow := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Format(time.RFC3339)
	if !strings.Contains(apiErr.Message, "tiny_budget") || !strings.Contains(apiErr.Message, tomorrow) {
		t.Fatalf("message %q should name the budget and its reset %s", apiErr.Message, tomorrow)
	}
}

// An Anthropic provider's 429 without retry-after is its spend cap: the
// gateway calls it once, passes it on as terminal (x-should-retry: false,
// class terminal), and the official Anthropic SDKs (Go and Node),
// retrying by default, ask once. With retry-after it stays a throttle the SDK may retry.
func TestSDK_AnthropicSpendCapIsTerminal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		retryAfter   string
		wantUpstream int
		wantSDK      int
		wantClass    string

		node bool
	}{
		{"WithoutRetryAfter", "", 1, 1, "terminal", false},
		{"WithRetryAfter", "0", 6, 2, "transient", false},
		{"NodeWithoutRetryAfter", "", 1, 1, "terminal", true},
		{"NodeWithRetryAfter", "0", 6, 2, "transient", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var upstream atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				upstream.Add(1)
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(429)
				fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit."}}`)
			}))
			t.Cleanup(srv.Close)
			h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
				o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "an", Kind: gateway.KindAnthropic, BaseURL: srv.URL, APIKey: "sk-ant"})
				o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "claude-capped", Provider: "an", MaxOutputTokens: 100})
			}}})
			if tc.node {
				// The official Anthropic Node SDK, retrying once at most.
				cmd := exec.Command("node", "spendcap.mjs", h.url, testKey, "claude-capped", "1")
				cmd.Dir = npmClients(t)
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("node spendcap.mjs: %v\n%s", err, out)
				}
				var res struct{ Attempts, Status int }
				if err := json.Unmarshal(out, &res); err != nil || res.Status != 429 || res.Attempts != tc.wantSDK || int(upstream.Load()) != tc.wantUpstream {
					t.Fatalf("node: %s (%v): the SDK asked %d times (want %d), the provider was called %d times (want %d)",
						out, err, res.Attempts, tc.wantSDK, upstream.Load(), tc.wantUpstream)
				}
				return
			}
			asked := 0
			c := anthropicClient(h, anthropicoption.WithMaxRetries(1), anthropicoption.WithMiddleware(func(r *http.Request, next anthropicoption.MiddlewareNext) (*http.Response, error) {
				asked++
				return next(r)
			}))
			_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "claude-capped", MaxTokens: 10,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
				t.Fatalf("got %v, want the provider's 429", err)
			}
			if asked != tc.wantSDK || int(upstream.Load()) != tc.wantUpstream {
				t.Fatalf("the SDK asked %d times (want %d), the provider was called %d times (want %d)", asked, tc.wantSDK, upstream.Load(), tc.wantUpstream)
			}
			if got := h.used("daily_tokens"); got != 0 {
				t.Errorf("budget charged %d for a call the provider refused", got)
			}
			if ev := h.rec.waitEvents(t, tc.wantSDK); ev[len(ev)-1].Class != tc.wantClass {
				t.Errorf("event class %q, want %q", ev[len(ev)-1].Class, tc.wantClass)
			}
		})
	}
}
