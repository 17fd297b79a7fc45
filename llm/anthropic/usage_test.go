package anthropic

import (
	"testing"

	"github.com/sluicehq/sluice/llm"
)

func TestMessageUsage_SumsCacheIntoInput(t *testing.T) {
	cases := []struct {
		name string
		body string
		want llm.Usage
		ok   bool
	}{
		{"Cache", `{"id":"m","content":[],"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":42}}`,
			llm.Usage{InputTokens: 3210, OutputTokens: 42, CachedInputTokens: 3000, CacheWriteTokens: 200}, true},
		{"NullCache", `{"usage":{"input_tokens":10,"cache_creation_input_tokens":null,"output_tokens":1}}`,
			llm.Usage{InputTokens: 10, OutputTokens: 1}, true},
		{"None", `{"type":"error"}`, llm.Usage{}, false},
	}
	for _, c := range cases {
		got, ok := MessageUsage([]byte(c.body))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestMessagesStream_UsageFromStartAndDelta(t *testing.T) {
	events := []struct{ name, data string }{
		{"message_start", `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"ping", `{"type": "ping"}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}`},
	}
	s := MessagesStream{}
	var u llm.Usage
	for _, e := range events {
		var fwd []byte
		fwd, u = s.Feed([]byte(e.name), []byte(e.data))
		if string(fwd) != e.data {
			t.Errorf("forwarded %q", fwd)
		}
	}
	if u != (llm.Usage{InputTokens: 125, OutputTokens: 2, CachedInputTokens: 100}) || s.Reported() {
		t.Errorf("before message_delta: %+v reported %v", u, s.Reported())
	}
	_, u = s.Feed(nil, []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`))
	_, u = s.Feed([]byte("message_delta"), []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`))
	_, u = s.Feed([]byte("message_stop"), []byte(`{"type":"message_stop"}`))
	if u != (llm.Usage{InputTokens: 125, OutputTokens: 15, CachedInputTokens: 100}) || !s.Reported() {
		t.Errorf("final: %+v reported %v", u, s.Reported())
	}
}

func TestMessagesStream_DeltaRestatesInput(t *testing.T) {
	s := MessagesStream{}
	s.Feed(nil, []byte(`{"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}`))
	_, u := s.Feed(nil, []byte(`{"type":"message_delta","usage":{"input_tokens":30,"cache_read_input_tokens":5,"output_tokens":9}}`))
	if u != (llm.Usage{InputTokens: 35, OutputTokens: 9, CachedInputTokens: 5}) {
		t.Errorf("%+v", u)
	}
}

func FuzzMessagesStream(f *testing.F) {
	f.Add([]byte("message_start"), []byte(`{"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}`))
	f.Add([]byte(""), []byte(`{"type":"message_delta","usage":{"output_tokens":9}}`))
	f.Add([]byte("content_block_delta"), []byte(`{}`))
	f.Fuzz(func(t *testing.T, event, data []byte) {
		s := MessagesStream{}
		fwd, u := s.Feed(event, data)
		if string(fwd) != string(data) || u.OutputTokens < 0 || u.InputTokens < 0 {
			t.Fatalf("forwarded %q usage %+v", fwd, u)
		}
	})
}
