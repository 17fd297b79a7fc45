package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/llm"
)

func TestUsageReaders_Bodies(t *testing.T) {
	cases := []struct {
		name string
		read func([]byte) (llm.Usage, bool)
		body string
		want llm.Usage
		ok   bool
	}{
		{"Chat", ChatUsage, `{"id":"x","choices":[{"message":{"content":"usage"}}],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":64}}}`,
			llm.Usage{InputTokens: 100, OutputTokens: 20, CachedInputTokens: 64}, true},
		{"ChatCacheHitField", ChatUsage, `{"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_cache_hit_tokens":4}}`,
			llm.Usage{InputTokens: 10, OutputTokens: 2, CachedInputTokens: 4}, true},
		{"ChatNoUsage", ChatUsage, `{"id":"x","usage":null}`, llm.Usage{}, false},
		{"ChatNotJSON", ChatUsage, `<html>`, llm.Usage{}, false},
		{"Responses", ResponsesUsage, `{"id":"r","output":[],"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":10},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":57}}`,
			llm.Usage{InputTokens: 50, OutputTokens: 7, CachedInputTokens: 10}, true},
		{"Embeddings", EmbeddingsUsage, `{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`,
			llm.Usage{InputTokens: 8}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := c.read([]byte(c.body))
			if got != c.want || ok != c.ok {
				t.Errorf("got %+v %v, want %+v %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestChatStream_StripsInjectedUsage(t *testing.T) {
	chunks := []string{
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}],"usage":null}`,
		`{"usage":null, "id":"c","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0}}}`,
		`[DONE]`,
	}
	want := []string{
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		``,
		`[DONE]`,
	}
	s := ChatStream{StripUsage: true}
	var u llm.Usage
	for i, c := range chunks {
		var fwd []byte
		fwd, u = s.Feed(nil, []byte(c))
		if string(fwd) != want[i] || (want[i] == "") != (fwd == nil) {
			t.Errorf("chunk %d forwarded %q, want %q", i, fwd, want[i])
		}
		if i == 2 && (u != llm.Usage{OutputTokens: 2} || s.Reported()) {
			t.Errorf("after chunk 2: usage %+v reported %v, want 2 counted output tokens", u, s.Reported())
		}
	}
	if u != (llm.Usage{InputTokens: 9, OutputTokens: 2}) || !s.Reported() {
		t.Errorf("final usage %+v reported %v", u, s.Reported())
	}
}

func TestChatStream_ForwardsUnchangedWhenClientAsked(t *testing.T) {
	s := ChatStream{}
	last := `{"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}`
	for _, c := range []string{`{"choices":[{"delta":{"content":"a"}}],"usage":null}`, last} {
		if fwd, _ := s.Feed(nil, []byte(c)); string(fwd) != c {
			t.Errorf("forwarded %q, want %q", fwd, c)
		}
	}
	if u := s.Usage(); u.InputTokens != 9 || u.OutputTokens != 2 {
		t.Errorf("usage %+v", u)
	}
}

func TestChatStream_CountsDeltasPerChoice(t *testing.T) {
	s := ChatStream{}
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"content":""}},{"index":1,"delta":{"refusal":"no"}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
	} {
		s.Feed(nil, []byte(c))
	}
	if u := s.Usage(); u.OutputTokens != 4 || s.Reported() {
		t.Errorf("usage %+v, want 4 counted output tokens", u)
	}
}

func TestResponsesStream_UsageFromTerminalEvents(t *testing.T) {
	for _, terminal := range []string{"response.completed", "response.incomplete", "response.failed"} {
		s := ResponsesStream{}
		s.Feed([]byte("response.created"), []byte(`{"type":"response.created","response":{"usage":null}}`))
		s.Feed(nil, []byte(`{"type":"response.output_text.delta","delta":"a"}`))
		_, u := s.Feed([]byte("response.output_text.delta"), []byte(`{"type":"response.output_text.delta","delta":"b"}`))
		if u.OutputTokens != 2 || s.Reported() {
			t.Errorf("%s: before terminal usage %+v", terminal, u)
		}
		data := `{"type":"` + terminal + `","response":{"id":"r","usage":{"input_tokens":5,"output_tokens":9,"input_tokens_details":{"cached_tokens":1}}}}`
		fwd, u := s.Feed(nil, []byte(data))
		if string(fwd) != data || u != (llm.Usage{InputTokens: 5, OutputTokens: 9, CachedInputTokens: 1}) || !s.Reported() {
			t.Errorf("%s: usage %+v", terminal, u)
		}
	}
}

func TestErrorBody_Shape(t *testing.T) {
	cases := []struct {
		name  string
		body  []byte
		check string
	}{
		{"WithLimit", ErrorBody("Rate limit reached.", "rate_limit_error", "rate_limit_exceeded", "", map[string]any{"rule": "r", "retry_after_ms": 1200}),
			`{"error":{"message":"Rate limit reached.","type":"rate_limit_error","code":"rate_limit_exceeded","param":null,"limit":{"retry_after_ms":1200,"rule":"r"}}}`},
		{"NoLimit", ErrorBody("Bad.", "invalid_request_error", "", "max_tokens", nil),
			`{"error":{"message":"Bad.","type":"invalid_request_error","code":null,"param":"max_tokens"}}`},
		{"UnencodableLimit", ErrorBody("x", "t", "c", "p", make(chan int)),
			`{"error":{"message":"x","type":"t","code":"c","param":"p"}}`},
	}
	for _, c := range cases {
		if string(c.body) != c.check {
			t.Errorf("%s: %s\nwant %s", c.name, c.body, c.check)
		}
	}
}

func FuzzChatStream(f *testing.F) {
	f.Add([]byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"Hel"}}],"usage":null}`), true)
	f.Add([]byte(`{"usage":null}`), true)
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":1}}`), false)
	f.Add([]byte(`[DONE]`), true)
	f.Fuzz(func(t *testing.T, data []byte, strip bool) {
		s := ChatStream{StripUsage: strip}
		orig := string(data)
		fwd, u := s.Feed(nil, data)
		if string(data) != orig {
			t.Fatal("input modified")
		}
		if u.OutputTokens < 0 || u.InputTokens < 0 {
			t.Fatalf("negative usage %+v", u)
		}
		if fwd != nil && json.Valid(data) && !json.Valid(fwd) {
			t.Fatalf("valid %q forwarded as invalid %q", data, fwd)
		}
		if strip && fwd != nil && json.Valid(data) && strings.HasPrefix(strings.TrimSpace(orig), "{") {
			var m map[string]json.RawMessage
			if json.Unmarshal(fwd, &m) == nil {
				if _, ok := m["usage"]; ok && !strings.Contains(orig, `\u`) {
					t.Fatalf("usage left in %q", fwd)
				}
			}
		}
	})
}

func FuzzResponsesStream(f *testing.F) {
	f.Add([]byte("response.completed"), []byte(`{"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":9}}}`))
	f.Add([]byte(""), []byte(`{"type":"response.output_text.delta","delta":"b"}`))
	f.Fuzz(func(t *testing.T, event, data []byte) {
		s := ResponsesStream{}
		fwd, u := s.Feed(event, data)
		if string(fwd) != string(data) || u.OutputTokens < 0 {
			t.Fatalf("forwarded %q usage %+v", fwd, u)
		}
	})
}
