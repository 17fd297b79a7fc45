package mockprovider

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
)

func start(t *testing.T, o Options) (*Server, *httptest.Server) {
	t.Helper()
	s := New(o)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// prompt12 is 12 bytes of prompt text: 3 input tokens.
const prompt12 = "hello world!"

func TestServer_NonStreamingUsage(t *testing.T) {
	_, ts := start(t, Options{})
	cases := []struct {
		name, path, body string
		read             func([]byte) (llm.Usage, bool)
		want             llm.Usage
		text             string
	}{
		{"Chat", "/v1/chat/completions", `{"model":"mock-small","max_tokens":10,"n":2,"messages":[{"role":"user","content":"` + prompt12 + `"}]}`,
			openai.ChatUsage, llm.Usage{InputTokens: 3, OutputTokens: 20}, `"finish_reason":"length"`},
		{"ChatDefaultCap", "/v1/chat/completions", `{"model":"mock-large","messages":[{"role":"system","content":"abcd"},{"role":"user","content":[{"type":"text","text":"e"}]}]}`,
			openai.ChatUsage, llm.Usage{InputTokens: 2, OutputTokens: 256}, `"finish_reason":"stop"`},
		{"ChatTokensDirective", "/v1/chat/completions", `{"model":"mock-small","max_completion_tokens":50,"messages":[{"role":"user","content":"[mock tokens=7]"}]}`,
			openai.ChatUsage, llm.Usage{InputTokens: 4, OutputTokens: 7}, `"content":" lorem ipsum dolor sit amet consectetur adipiscing"`},
		{"ChatTokensNeverAboveCap", "/v1/chat/completions", `{"model":"mock-small","max_completion_tokens":5,"messages":[{"role":"user","content":"[mock tokens=700]"}]}`,
			openai.ChatUsage, llm.Usage{InputTokens: 5, OutputTokens: 5}, `"finish_reason":"length"`},
		{"Responses", "/v1/responses", `{"model":"mock-small","instructions":"abcd","input":"` + prompt12 + `","max_output_tokens":16}`,
			openai.ResponsesUsage, llm.Usage{InputTokens: 4, OutputTokens: 16}, `"status":"incomplete"`},
		{"ResponsesCompleted", "/v1/responses", `{"model":"mock-small","input":[{"role":"user","content":[{"type":"input_text","text":"[mock tokens=3]"}]}],"max_output_tokens":16}`,
			openai.ResponsesUsage, llm.Usage{InputTokens: 4, OutputTokens: 3}, `"status":"completed"`},
		{"Embeddings", "/v1/embeddings", `{"model":"mock-small","input":["` + prompt12 + `","abcd"]}`,
			openai.EmbeddingsUsage, llm.Usage{InputTokens: 4}, `"index":1`},
		{"EmbeddingsTokens", "/v1/embeddings", `{"model":"mock-small","input":[[1,2,3],[4]],"encoding_format":"base64","dimensions":4}`,
			openai.EmbeddingsUsage, llm.Usage{InputTokens: 4}, `"embedding":"`},
		{"Messages", "/v1/messages", `{"model":"mock-small","max_tokens":12,"system":"abcd","messages":[{"role":"user","content":"` + prompt12 + `"}]}`,
			anthropic.MessageUsage, llm.Usage{InputTokens: 4, OutputTokens: 12}, `"stop_reason":"max_tokens"`},
		{"MessagesEndTurn", "/v1/messages", `{"model":"mock-small","max_tokens":12,"messages":[{"role":"user","content":[{"type":"text","text":"[mock tokens=2]"}]}]}`,
			anthropic.MessageUsage, llm.Usage{InputTokens: 4, OutputTokens: 2}, `"text":" lorem ipsum"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := post(t, context.Background(), ts.URL+c.path, c.body)
			body := readAll(t, resp)
			if resp.StatusCode != 200 || !json.Valid(body) {
				t.Fatalf("status %d body %s", resp.StatusCode, body)
			}
			u, ok := c.read(body)
			if !ok || u != c.want {
				t.Errorf("usage %+v %v, want %+v", u, ok, c.want)
			}
			if !strings.Contains(string(body), c.text) {
				t.Errorf("body lacks %s: %s", c.text, body)
			}
		})
	}
}

// events reads a whole SSE stream, returning the events (name and data) and the error that
// ended it (nil at a clean end).
func events(t *testing.T, resp *http.Response) ([][2]string, error) {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	r := llm.NewEventReader(bufio.NewReader(resp.Body))
	var out [][2]string
	for {
		e, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, [2]string{string(e.Name), string(e.Data)})
	}
}

func TestServer_StreamingChat(t *testing.T) {
	_, ts := start(t, Options{TokensPerChunk: 3})
	cases := []struct {
		name, body   string
		includeUsage bool
		want         llm.Usage
		chunks       int
	}{
		{"IncludeUsage", `{"model":"mock-small","stream":true,"stream_options":{"include_usage":true},"max_tokens":10,"messages":[{"role":"user","content":"` + prompt12 + `"}]}`,
			true, llm.Usage{InputTokens: 3, OutputTokens: 10}, 1 + 4 + 1 + 1 + 1},
		{"NoUsageTwoChoices", `{"model":"mock-small","stream":true,"n":2,"max_tokens":4,"messages":[{"role":"user","content":"` + prompt12 + `"}]}`,
			false, llm.Usage{OutputTokens: 4}, 2 + 4 + 2 + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, err := events(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", c.body))
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != c.chunks || evs[len(evs)-1][1] != "[DONE]" {
				t.Fatalf("%d events, want %d ending in [DONE]: %q", len(evs), c.chunks, evs)
			}
			s := openai.ChatStream{}
			var u llm.Usage
			for _, e := range evs {
				if e[1] != "[DONE]" {
					var m map[string]json.RawMessage
					if err := json.Unmarshal([]byte(e[1]), &m); err != nil {
						t.Fatalf("chunk %s: %v", e[1], err)
					}
					if _, has := m["usage"]; has != c.includeUsage {
						t.Errorf("chunk %s: usage member present %v", e[1], has)
					}
				}
				_, u = s.Feed(nil, []byte(e[1]))
			}
			if u != c.want || s.Reported() != c.includeUsage {
				t.Errorf("usage %+v reported %v, want %+v", u, s.Reported(), c.want)
			}
		})
	}
}

func TestServer_StreamingResponses(t *testing.T) {
	_, ts := start(t, Options{})
	cases := []struct {
		name, body, terminal string
		want                 llm.Usage
	}{
		{"Incomplete", `{"model":"mock-small","stream":true,"input":"` + prompt12 + `","max_output_tokens":16}`, "response.incomplete", llm.Usage{InputTokens: 3, OutputTokens: 16}},
		{"Completed", `{"model":"mock-small","stream":true,"input":"[mock tokens=5]"}`, "response.completed", llm.Usage{InputTokens: 4, OutputTokens: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, err := events(t, post(t, context.Background(), ts.URL+"/v1/responses", c.body))
			if err != nil {
				t.Fatal(err)
			}
			s := openai.ResponsesStream{}
			var u llm.Usage
			for i, e := range evs {
				var m struct {
					Type string `json:"type"`
					Seq  int    `json:"sequence_number"`
				}
				if err := json.Unmarshal([]byte(e[1]), &m); err != nil || m.Type != e[0] || m.Seq != i {
					t.Fatalf("event %d %q: %+v %v", i, e, m, err)
				}
				_, u = s.Feed([]byte(e[0]), []byte(e[1]))
			}
			if evs[0][0] != "response.created" || evs[len(evs)-1][0] != c.terminal {
				t.Errorf("events from %s to %s", evs[0][0], evs[len(evs)-1][0])
			}
			if u != c.want || !s.Reported() {
				t.Errorf("usage %+v, want %+v", u, c.want)
			}
		})
	}
}

func TestServer_StreamingMessages(t *testing.T) {
	_, ts := start(t, Options{TokensPerChunk: 2})
	body := `{"model":"mock-small","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"` + prompt12 + `"}]}`
	evs, err := events(t, post(t, context.Background(), ts.URL+"/v1/messages", body))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	s := anthropic.MessagesStream{}
	var u llm.Usage
	for _, e := range evs {
		if !json.Valid([]byte(e[1])) {
			t.Errorf("event %s: invalid JSON %s", e[0], e[1])
		}
		names = append(names, e[0])
		_, u = s.Feed([]byte(e[0]), []byte(e[1]))
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Errorf("events %s", names)
	}
	if u != (llm.Usage{InputTokens: 3, OutputTokens: 9}) || !s.Reported() {
		t.Errorf("usage %+v", u)
	}
}

// TestServer_OwnRateLimit: with RateLimitRequests the mock tells its
// remaining requests in the provider's headers and refuses past the limit
// with retry-after, until the bucket refills.
func TestServer_OwnRateLimit(t *testing.T) {
	srv := httptest.NewServer(New(Options{RateLimitRequests: 2, RateLimitWindow: 300 * time.Millisecond}))
	defer srv.Close()
	post := func(path, body string) *http.Response {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	chat := `{"model":"mock-small","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	r1 := post("/v1/chat/completions", chat)
	if r1.StatusCode != 200 || r1.Header.Get("x-ratelimit-remaining-requests") != "1" || r1.Header.Get("x-ratelimit-limit-requests") != "2" {
		t.Fatalf("first: %d %v", r1.StatusCode, r1.Header)
	}
	if d, err := time.ParseDuration(r1.Header.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("reset %q: %v", r1.Header.Get("x-ratelimit-reset-requests"), err)
	}
	msg := `{"model":"mock-small","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	r2 := post("/v1/messages", msg)
	if r2.StatusCode != 200 || r2.Header.Get("anthropic-ratelimit-requests-remaining") != "0" {
		t.Fatalf("second: %d %v", r2.StatusCode, r2.Header)
	}
	if _, err := time.Parse(time.RFC3339Nano, r2.Header.Get("anthropic-ratelimit-requests-reset")); err != nil {
		t.Fatal(err)
	}
	r3 := post("/v1/chat/completions", chat)
	if r3.StatusCode != 429 || r3.Header.Get("Retry-After") != "1" || r3.Header.Get("retry-after-ms") == "" {
		t.Fatalf("third: %d %v", r3.StatusCode, r3.Header)
	}
	// One call refills in 150 ms.
	time.Sleep(160 * time.Millisecond)
	if r := post("/v1/chat/completions", chat); r.StatusCode != 200 {
		t.Fatalf("after one call's refill: %d", r.StatusCode)
	}
	if r := post("/v1/chat/completions", chat); r.StatusCode != 429 {
		t.Fatalf("right after: %d", r.StatusCode)
	}
}

func TestServer_CountTokens(t *testing.T) {
	s := New(Options{})
	rec := httptest.NewRecorder()
	body := `{"model":"mock-small","messages":[{"role":"user","content":"twelve bytes"}]}`
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/messages/count_tokens", strings.NewReader(body)))
	if rec.Code != 200 || rec.Body.String() != `{"input_tokens":3}` {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got := s.Stats().Requests[RouteCountTokens]; got != 1 {
		t.Errorf("Requests[RouteCountTokens] %d", got)
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/messages/count_tokens", strings.NewReader(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`)))
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), `"type":"error"`) {
		t.Errorf("unknown model: %d %s", rec.Code, rec.Body)
	}
}
