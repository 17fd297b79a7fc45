package openaisdk_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/mockprovider"
	llmopenai "github.com/sluicehq/sluice/llm/openai"
	"github.com/sluicehq/sluice/sdk/openaisdk"
	"github.com/sluicehq/sluice/store/memstore"
)

func TestMiddleware_SettlesReportedUsage(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// call makes the SDK call and returns the usage the client saw (zero when it saw none).
		call   func(t *testing.T, c openai.Client) (in, out int64)
		wantIn int64
		// wantOut is the output the mock reports.
		wantOut int64
	}{
		{
			name: "chat",
			call: func(t *testing.T, c openai.Client) (int64, int64) {
				resp, err := c.Chat.Completions.New(ctx, chatParams(prompt))
				if err != nil {
					t.Fatal(err)
				}
				return resp.Usage.PromptTokens, resp.Usage.CompletionTokens
			},
			wantIn: promptTokens, wantOut: 7,
		},
		{
			name: "chat stream without include_usage: injected and hidden",
			call: func(t *testing.T, c openai.Client) (int64, int64) {
				stream := c.Chat.Completions.NewStreaming(ctx, chatParams(prompt))
				defer stream.Close()
				var text strings.Builder
				for stream.Next() {
					chunk := stream.Current()
					if chunk.JSON.Usage.Valid() {
						t.Fatalf("the client saw usage it did not ask for: %s", chunk.RawJSON())
					}
					for _, ch := range chunk.Choices {
						text.WriteString(ch.Delta.Content)
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				if n := len(strings.Fields(text.String())); n != 7 {
					t.Fatalf("streamed %d words, want 7: %q", n, text.String())
				}
				return 0, 0
			},
			wantIn: promptTokens, wantOut: 7,
		},
		{
			name: "chat stream with include_usage: passed on",
			call: func(t *testing.T, c openai.Client) (int64, int64) {
				p := chatParams(prompt)
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				stream := c.Chat.Completions.NewStreaming(ctx, p)
				defer stream.Close()
				var usage openai.CompletionUsage
				for stream.Next() {
					if chunk := stream.Current(); chunk.JSON.Usage.Valid() && chunk.Usage.TotalTokens > 0 {
						usage = chunk.Usage
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				return usage.PromptTokens, usage.CompletionTokens
			},
			wantIn: promptTokens, wantOut: 7,
		},
		{
			name: "responses",
			call: func(t *testing.T, c openai.Client) (int64, int64) {
				resp, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "mock-large", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
					MaxOutputTokens: openai.Int(100),
				})
				if err != nil {
					t.Fatal(err)
				}
				return resp.Usage.InputTokens, resp.Usage.OutputTokens
			},
			wantIn: promptTokens, wantOut: 7,
		},
		{
			name: "responses stream",
			call: func(t *testing.T, c openai.Client) (int64, int64) {
				stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
					Model: "mock-large", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
					MaxOutputTokens: openai.Int(100),
				})
				defer stream.Close()
				var usage responses.ResponseUsage
				for stream.Next() {
					if ev := stream.Current(); ev.Type == "response.completed" {
						usage = ev.Response.Usage
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				return usage.InputTokens, usage.OutputTokens
			},
			wantIn: promptTokens, wantOut: 7,
		},
		{
			name: "embeddings",
			call: func(t *testing.T, c openai.Client) (int64, int64) {
				resp, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
					Model: "mock-small", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(prompt)},
				})
				if err != nil {
					t.Fatal(err)
				}
				return resp.Usage.PromptTokens, 0
			},
			wantIn: promptTokens, wantOut: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1_000_000), costBudget}, openaisdk.Options{})
			in, out := tt.call(t, h.client)
			if (in != 0 || out != 0) && (in != tt.wantIn || out != tt.wantOut) {
				t.Fatalf("the client saw %d in, %d out; want %d, %d", in, out, tt.wantIn, tt.wantOut)
			}
			if got, want := h.used(t, "daily_tokens"), tt.wantIn+tt.wantOut; got != want {
				t.Fatalf("budget used %d tokens, want exactly the reported %d", got, want)
			}
			wantCost := price.Cost(sluice.Usage{InputTokens: tt.wantIn, OutputTokens: tt.wantOut})
			if got := h.used(t, "daily_cost"); got != wantCost {
				t.Fatalf("cost budget used %d, want %d", got, wantCost)
			}
			if st := h.l.Stats(); st.Admitted != 1 || st.Refused != 0 {
				t.Fatalf("limiter stats %+v, want one admission", st)
			}
		})
	}
}

func TestMiddleware_SetsOutputCapWhenAbsent(t *testing.T) {
	opts := openaisdk.Options{MaxOutputTokens: func(model string) int64 {
		if model == "mock-small" {
			return 20
		}
		return 0
	}}
	h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1_000_000)}, opts)
	p := chatParams("No directive here.")
	p.MaxTokens = param.Opt[int64]{} // absent
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	// The mock answers exactly the cap it was sent.
	if resp.Usage.CompletionTokens != 20 {
		t.Fatalf("completion tokens %d, want the cap 20 set by the middleware", resp.Usage.CompletionTokens)
	}
	if got := h.used(t, "daily_tokens"); got != resp.Usage.TotalTokens {
		t.Fatalf("budget used %d, want %d", got, resp.Usage.TotalTokens)
	}
}

func TestMiddleware_RateLimitedIsRetriedAfterRetryAfterMs(t *testing.T) {
	perWindow := sluice.Rule{Name: "per_window", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: 300 * time.Millisecond}
	h := newHarness(t, mockprovider.Options{}, []sluice.Rule{perWindow}, openaisdk.Options{})
	ctx := context.Background()
	if _, err := h.client.Chat.Completions.New(ctx, chatParams(prompt)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := h.client.Chat.Completions.New(ctx, chatParams(prompt)); err != nil {
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
	if n := h.mock.Stats().Requests[mockprovider.RouteChat]; n != 2 {
		t.Fatalf("the provider saw %d requests, want 2 (the refused attempt never left)", n)
	}
}

func TestMiddleware_TerminalRefusalsReachTheCallerOnce(t *testing.T) {
	tests := []struct {
		name   string
		rules  []sluice.Rule
		first  bool // a first call succeeds and uses up the rule
		status int
		code   string
	}{
		{
			name:   "budget",
			rules:  []sluice.Rule{{Name: "tiny_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 1, Period: sluice.PeriodDay}},
			first:  true,
			status: 429, code: "budget_exceeded",
		},
		{
			name:   "never fits",
			rules:  []sluice.Rule{tokenBudget(50)},
			status: 413, code: "request_too_large",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, mockprovider.Options{}, tt.rules, openaisdk.Options{})
			ctx := context.Background()
			if tt.first {
				if _, err := h.client.Chat.Completions.New(ctx, chatParams(prompt)); err != nil {
					t.Fatal(err)
				}
			}
			before := h.mock.Stats().Requests[mockprovider.RouteChat]
			_, err := h.client.Chat.Completions.New(ctx, chatParams(prompt))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status {
				t.Fatalf("got %v, want an *openai.Error with status %d", err, tt.status)
			}
			if apiErr.Code != tt.code || !strings.Contains(apiErr.Message, tt.rules[0].Name) {
				t.Fatalf("error code %q message %q, want %q naming %q", apiErr.Code, apiErr.Message, tt.code, tt.rules[0].Name)
			}
			if got := apiErr.Response.Header.Get("x-should-retry"); got != "false" {
				t.Fatalf("x-should-retry %q", got)
			}
			statuses, _ := h.attempts()
			if want := map[bool]int{true: 2, false: 1}[tt.first]; len(statuses) != want {
				t.Fatalf("the SDK made %d attempts (%v), want %d: a terminal refusal is never retried", len(statuses), statuses, want)
			}
			if n := h.mock.Stats().Requests[mockprovider.RouteChat] - before; n != 0 {
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
		// closeAfter closes the stream after that many content chunks; 0 reads to the end.
		closeAfter int
		chunks     int64
		wantErr    bool
	}{
		{name: "closed by the caller", prompt: "Count slowly. [mock tokens=50]", closeAfter: 3, chunks: 3},
		{name: "cut by the provider", prompt: "Count slowly. [mock tokens=50 cut=4]", chunks: 4, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, mockprovider.Options{ChunkInterval: time.Millisecond},
				[]sluice.Rule{tokenBudget(1_000_000), outputBudget}, openaisdk.Options{}, option.WithMaxRetries(0))
			stream := h.client.Chat.Completions.NewStreaming(context.Background(), chatParams(tt.prompt))
			var received int64
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					if ch.Delta.Content != "" {
						received++
					}
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
			if received != tt.chunks {
				t.Fatalf("received %d chunks, want %d", received, tt.chunks)
			}
			if got := h.used(t, "daily_output"); got != received {
				t.Fatalf("output charged %d, want the %d chunks received", got, received)
			}
			_, bodies := h.attempts()
			bound, err := llmopenai.ParseChat(bodies[0])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := h.used(t, "daily_tokens"), bound.InputTokens+received; got != want {
				t.Fatalf("tokens charged %d, want the input estimate %d and the output received %d", got, bound.InputTokens, received)
			}
		})
	}
}

func TestMiddleware_ProviderErrorsReleaseTheReservation(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 500} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			inFlight := sluice.Rule{Name: "in_flight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1}
			h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1_000_000), inFlight}, openaisdk.Options{})
			_, err := h.client.Chat.Completions.New(context.Background(), chatParams("[mock status="+strconv.Itoa(status)+"]"))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != status {
				t.Fatalf("got %v, want the provider's %d", err, status)
			}
			if got := h.used(t, "daily_tokens"); got != 0 {
				t.Fatalf("budget used %d after the provider refused, want 0", got)
			}
			if got := h.used(t, "in_flight"); got != 0 {
				t.Fatalf("%d calls still in flight", got)
			}
			statuses, _ := h.attempts()
			if status == 500 && len(statuses) != 3 {
				t.Fatalf("attempts %v: the SDK should retry a provider 500 (each attempt admitted anew)", statuses)
			}
		})
	}
}

func TestMiddleware_OtherRequestsPassThrough(t *testing.T) {
	h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1)}, openaisdk.Options{})
	page, err := h.client.Models.List(context.Background())
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

func TestMiddleware_IdentityFromContext(t *testing.T) {
	type userKey struct{}
	perUser := sluice.Rule{Name: "per_user", Kind: sluice.KindBudget, Subject: "user", Metric: sluice.MetricRequests, Limit: 1, Period: sluice.PeriodDay}
	opts := openaisdk.Options{Identity: func(r *http.Request) sluice.Identity {
		user, _ := r.Context().Value(userKey{}).(string)
		return sluice.Identity{Workspace: "w1", User: user}
	}}
	h := newHarness(t, mockprovider.Options{}, []sluice.Rule{perUser}, opts)
	for _, user := range []string{"ann", "bob"} {
		ctx := context.WithValue(context.Background(), userKey{}, user)
		if _, err := h.client.Chat.Completions.New(ctx, chatParams(prompt)); err != nil {
			t.Fatalf("%s: %v", user, err)
		}
	}
	ctx := context.WithValue(context.Background(), userKey{}, "ann")
	if _, err := h.client.Chat.Completions.New(ctx, chatParams(prompt)); err == nil {
		t.Fatal("ann's second call was admitted past her budget")
	}
	all, err := h.l.Effective(context.Background(), sluice.Identity{User: "bob", Model: "mock-small", Route: "chat"})
	if err != nil || len(all) != 1 || all[0].Used != 1 {
		t.Fatalf("bob's budget %+v %v", all, err)
	}
}

func TestMiddleware_StoreUnavailableIsRetriedAfterASecond(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mockprovider.Options{}, []sluice.Rule{tokenBudget(1_000_000)}, openaisdk.Options{})
	l, err := sluice.New(sluice.Options{Store: &downOnce{Store: memstore.New(memstore.Options{})}, Rules: []sluice.Rule{tokenBudget(1_000_000)}})
	if err != nil {
		t.Fatal(err)
	}
	h.l = l
	var refusal http.Header
	c := openai.NewClient(option.WithBaseURL(h.srvURL+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(1),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(r)
			if resp != nil && resp.StatusCode == 503 {
				refusal = resp.Header.Clone()
			}
			return resp, err
		}, openaisdk.Middleware(l, openaisdk.Options{Identity: func(*http.Request) sluice.Identity { return who }})))
	start := time.Now()
	if _, err := c.Chat.Completions.New(context.Background(), chatParams(prompt)); err != nil {
		t.Fatalf("the SDK did not recover from a store blink: %v", err)
	}
	if refusal.Get("Retry-After") != "1" || refusal.Get("x-should-retry") != "" {
		t.Fatalf("503 headers %v, want Retry-After: 1 and no x-should-retry", refusal)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("the SDK retried after %v, before Retry-After", waited)
	}
	if got := h.used(t, "daily_tokens"); got != promptTokens+7 {
		t.Fatalf("budget used %d, want %d", got, promptTokens+7)
	}
}
