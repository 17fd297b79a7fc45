package gateway_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/sluicehq/sluice/gateway"
)

// The official SDKs read a replayed stream as they read a live one: the
// same text and the same usage.
func TestCache_SDKsReadReplayedStreams(t *testing.T) {
	h := cacheHarness(t, nil)
	var seen []string
	c := openaiClient(h, option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if resp != nil {
			seen = append(seen, resp.Header.Get(gateway.HeaderCache))
		}
		return resp, err
	}))
	chat := func() (string, int64) {
		stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model: "mock-small", MaxTokens: openai.Int(20), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		return acc.Choices[0].Message.Content, acc.Usage.CompletionTokens
	}
	text1, out1 := chat()
	text2, out2 := chat()
	if text1 == "" || text1 != text2 || out1 != 7 || out2 != 7 || len(seen) != 2 || seen[0] != "miss" || seen[1] != "hit" {
		t.Fatalf("OpenAI: %q (%d tokens) then %q (%d tokens), %s %v", text1, out1, text2, out2, gateway.HeaderCache, seen)
	}

	var anthSeen []string
	a := anthropicClient(h, anthropicoption.WithMiddleware(func(r *http.Request, next anthropicoption.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if resp != nil {
			anthSeen = append(anthSeen, resp.Header.Get(gateway.HeaderCache))
		}
		return resp, err
	}))
	message := func() anthropic.Message {
		stream := a.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "mock-small", MaxTokens: 50,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
		var acc anthropic.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		return acc
	}
	m1, m2 := message(), message()
	if len(m1.Content) == 0 || m1.Content[0].Text != m2.Content[0].Text || m2.Usage.OutputTokens != 7 || len(anthSeen) != 2 || anthSeen[1] != "hit" {
		t.Fatalf("Anthropic: %+v then %+v, %s %v", m1.Content, m2.Content, gateway.HeaderCache, anthSeen)
	}
}
