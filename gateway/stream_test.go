package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/sluicehq/sluice"
)

// contentStream is a streamed call seen from the client: next returns true
// for each content chunk received (one token each from the mock), false
// at the end.
type contentStream struct {
	next  func() bool
	err   func() error
	close func()
}

func openChatStream(ctx context.Context, h *harness, prompt string, maxTokens int64) contentStream {
	c := openaiClient(h)
	s := c.Chat.Completions.NewStreaming(ctx, chatParams(prompt, maxTokens))
	return contentStream{
		next: func() bool {
			for s.Next() {
				for _, ch := range s.Current().Choices {
					if ch.Delta.Content != "" {
						return true
					}
				}
			}
			return false
		},
		err:   s.Err,
		close: func() { _ = s.Close() },
	}
}

func openResponsesStream(ctx context.Context, h *harness, prompt string, maxTokens int64) contentStream {
	c := openaiClient(h)
	s := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "mock-small", MaxOutputTokens: openai.Int(maxTokens),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}})
	return contentStream{
		next: func() bool {
			for s.Next() {
				if s.Current().Type == "response.output_text.delta" {
					return true
				}
			}
			return false
		},
		err:   s.Err,
		close: func() { _ = s.Close() },
	}
}

func openMessagesStream(ctx context.Context, h *harness, prompt string, maxTokens int64) contentStream {
	c := anthropicClient(h)
	s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "mock-small", MaxTokens: maxTokens,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
	return contentStream{
		next: func() bool {
			for s.Next() {
				if s.Current().Type == "content_block_delta" {
					return true
				}
			}
			return false
		},
		err:   s.Err,
		close: func() { _ = s.Close() },
	}
}

var streamAPIs = []struct {
	name, route string
	open        func(ctx context.Context, h *harness, prompt string, maxTokens int64) contentStream
}{
	{"Chat", "chat", openChatStream},
	{"Responses", "responses", openResponsesStream},
	{"Messages", "messages", openMessagesStream},
}

// TestGateway_ClientCancelsMidStream: a client that goes away is charged
// the input estimate and the output streamed so far (one token per content
// chunk, the documented counting rule when no usage arrived), and the
// upstream call is cancelled.
func TestGateway_ClientCancelsMidStream(t *testing.T) {
	t.Parallel()
	for _, api := range streamAPIs {
		t.Run(api.name, func(t *testing.T) {
			h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, mock: mockOptions(20 * time.Millisecond)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := api.open(ctx, h, "count slowly", 2000)
			const read = 3
			for i := 0; i < read; i++ {
				if !s.next() {
					t.Fatalf("stream ended after %d chunks: %v", i, s.err())
				}
			}
			cancel()
			s.close()
			rec := h.rec.waitUsage(t, 1)[0]
			// The gateway forwards a chunk or two before it notices the
			// client is gone, and a slow client may not have read the
			// chunks already in its socket: a few more than read, far
			// fewer than the 2000 reserved.
			if rec.OutputTokens < read || rec.OutputTokens > read+5 {
				t.Errorf("charged %d output tokens, the client received %d", rec.OutputTokens, read)
			}
			if rec.Route != api.route || rec.InputTokens <= 0 {
				t.Errorf("ledger %+v", rec)
			}
			if got := h.used("daily_tokens"); got != rec.InputTokens+rec.OutputTokens {
				t.Errorf("budget charged %d, want the %d streamed (not the 2000-token reservation)", got, rec.InputTokens+rec.OutputTokens)
			}
			eventually(t, "the mock to see the call cancelled", func() bool { return h.mock.Stats().StreamsCancelled == 1 })
			if st := h.mock.Stats(); st.StreamsCompleted != 0 {
				t.Errorf("mock stats %+v", st)
			}
			if ev := h.rec.waitEvents(t, 1); len(ev) != 1 || ev[0].Outcome != "client_gone" {
				t.Errorf("events %+v, want one client_gone", ev)
			}
		})
	}
}

// TestGateway_UpstreamCutMidStream: a provider that drops the stream after
// K chunks: the client sees the stream fail after those K chunks, and the
// call is settled with the input estimate and the K tokens counted.
func TestGateway_UpstreamCutMidStream(t *testing.T) {
	t.Parallel()
	for _, api := range streamAPIs {
		t.Run(api.name, func(t *testing.T) {
			h := newHarness(t, []sluice.Rule{dailyTokens})
			s := api.open(context.Background(), h, "[mock cut=4]", 100)
			got := 0
			for s.next() {
				got++
			}
			if got != 4 {
				t.Errorf("client received %d content chunks, want 4", got)
			}
			if s.err() == nil {
				t.Error("the stream ended cleanly: the cut was not passed on")
			}
			rec := h.rec.waitUsage(t, 1)[0]
			if rec.OutputTokens != 4 || rec.InputTokens <= 0 {
				t.Errorf("ledger %+v, want 4 output tokens", rec)
			}
			if used := h.used("daily_tokens"); used != rec.InputTokens+4 {
				t.Errorf("budget charged %d, want %d", used, rec.InputTokens+4)
			}
			if st := h.mock.Stats(); st.StreamsCut != 1 {
				t.Errorf("mock stats %+v", st)
			}
			if ev := h.rec.waitEvents(t, 1); ev[0].Outcome != "upstream_error" || ev[0].Usage.OutputTokens != 4 {
				t.Errorf("event %+v, want an upstream_error settled with 4 output tokens", ev[0])
			}
		})
	}
}

// TestGateway_StreamIsNotBuffered: with chunks 50 ms apart, the first one
// reaches the client long before the last is produced.
func TestGateway_StreamIsNotBuffered(t *testing.T) {
	h := startHarness(t, setup{mock: mockOptions(50 * time.Millisecond)})
	for _, api := range streamAPIs {
		t.Run(api.name, func(t *testing.T) {
			start := time.Now()
			s := api.open(context.Background(), h, "slow", 10)
			var at []time.Duration
			for s.next() {
				at = append(at, time.Since(start))
			}
			if err := s.err(); err != nil {
				t.Fatal(err)
			}
			if len(at) != 10 {
				t.Fatalf("%d chunks, want 10", len(at))
			}
			// The mock produces the last chunk 450 ms after the first; a
			// buffering proxy would deliver them together. (Half of it
			// leaves room for a loaded machine's scheduling.)
			if spread := at[9] - at[0]; spread < 225*time.Millisecond {
				t.Errorf("first chunk at %v, last at %v: the chunks were held back", at[0], at[9])
			}
		})
	}
}

// TestGateway_RawStreamPassesEventsThrough reads the SSE wire itself: the
// gateway adds include_usage for chat and hides the usage chunk, ends with
// [DONE], and sets the stream's headers.
func TestGateway_RawStreamPassesEventsThrough(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens})
	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"mock-small","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.Header.Get("X-Sluice-Model") != "mock-small" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	var data []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("events %q, want [DONE] last", data)
	}
	for _, d := range data {
		if strings.Contains(d, `"usage"`) {
			t.Errorf("usage reached a client that did not ask for it: %s", d)
		}
	}
	if rec := h.rec.waitUsage(t, 1)[0]; rec.OutputTokens != 3 {
		t.Errorf("ledger %+v", rec)
	}
}

func TestGateway_DrainWaitsForStreams(t *testing.T) {
	t.Parallel()
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, mock: mockOptions(20 * time.Millisecond)})
	const chunks = 25 // 20ms apart: the stream lasts about 500ms
	s := openChatStream(context.Background(), h, "drain me", chunks)
	if !s.next() {
		t.Fatalf("no first chunk: %v", s.err())
	}
	received := make(chan int, 1)
	go func() {
		n := 1
		for s.next() {
			n++
		}
		received <- n
	}()
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := h.gw.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with a stream in flight and a short deadline: %v", err)
	}
	if r := getReady(t, h); r != 503 {
		t.Errorf("readyz %d while draining, want 503", r)
	}
	if len(h.rec.usage()) != 0 {
		t.Fatal("settled before the stream ended")
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := h.gw.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	// Drain returned: the stream has ended and is settled, with no waiting.
	recs := h.rec.usage()
	if len(recs) != 1 || recs[0].OutputTokens != chunks {
		t.Fatalf("after Drain, ledger %+v, want one record of %d output tokens", recs, chunks)
	}
	if got := h.used("daily_tokens"); got != recs[0].InputTokens+chunks {
		t.Errorf("budget %d after Drain, want %d", got, recs[0].InputTokens+chunks)
	}
	if n := <-received; n != chunks {
		t.Errorf("client received %d chunks, want %d", n, chunks)
	}
	if err := s.err(); err != nil {
		t.Errorf("stream: %v", err)
	}
}

func getReady(t *testing.T, h *harness) int {
	t.Helper()
	resp, err := http.Get(h.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A stream cut at shutdown (CutStreams, once the drain's deadline passed)
// is settled with what it streamed, not left open for the next start's
// sweep to charge its whole reservation.
func TestGateway_CutStreamsSettleWhatTheyStreamed(t *testing.T) {
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, mock: mockOptions(20 * time.Millisecond)})
	const chunks = 200 // 20ms apart: the stream would last 4 s
	s := openChatStream(context.Background(), h, "cut me", chunks)
	if !s.next() {
		t.Fatalf("no first chunk: %v", s.err())
	}
	h.gw.CutStreams()
	for s.next() {
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.gw.Drain(ctx); err != nil {
		t.Fatalf("Drain after the cut: %v", err)
	}
	recs := h.rec.usage()
	if len(recs) != 1 || recs[0].Estimated || recs[0].OutputTokens < 1 || recs[0].OutputTokens >= chunks {
		t.Fatalf("ledger %+v: want one record of the output streamed before the cut (1 to %d tokens), not estimated", recs, chunks-1)
	}
	if got := h.used("daily_tokens"); got != recs[0].InputTokens+recs[0].OutputTokens || got >= recs[0].Reserved.InputTokens+recs[0].Reserved.OutputTokens {
		t.Errorf("budget %d: want what was streamed (%d), under the reservation", got, recs[0].InputTokens+recs[0].OutputTokens)
	}
}
