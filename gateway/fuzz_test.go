package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/valyala/fasthttp"
)

// fuzzStatuses are the statuses the gateway may answer a POST with when
// the provider behaves.
var fuzzStatuses = map[int]bool{200: true, 400: true, 403: true, 404: true, 413: true, 429: true, 503: true}

// textOf returns the prompt text of an upstream request as the mock reads
// it, and whether it asked for a stream.
func textOf(path string, body []byte) (text []byte, stream bool, ok bool) {
	visit := func(t []byte) { text = append(text, t...) }
	var b llm.Bound
	var err error
	switch path {
	case "/v1/chat/completions":
		b, err = openai.ParseChatText(body, visit)
	case "/v1/responses":
		b, err = openai.ParseResponsesText(body, visit)
	case "/v1/embeddings":
		b, err = openai.ParseEmbeddingsText(body, visit)
	default:
		b, err = anthropic.ParseMessagesText(body, visit)
	}
	return text, b.Stream, err == nil
}

// tameMock is the mock provider with its directives switched off: a fuzzed
// prompt that says [mock status=500] or [mock delay=...] is answered as
// if it had asked for nothing, so the statuses seen are the gateway's.
type tameMock struct{ mock http.Handler }

func (m tameMock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if text, stream, ok := textOf(r.URL.Path, body); ok && bytes.Contains(text, []byte("[mock")) {
		s := "false"
		if stream {
			s = "true"
		}
		switch r.URL.Path {
		case "/v1/embeddings":
			body = []byte(`{"model":"mock-small","input":"x"}`)
		case "/v1/responses":
			body = []byte(`{"model":"mock-small","stream":` + s + `,"max_output_tokens":16,"input":"x"}`)
		default: // chat and messages
			body = []byte(`{"model":"mock-small","stream":` + s + `,"max_tokens":4,"messages":[{"role":"user","content":"x"}]}`)
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	m.mock.ServeHTTP(w, r)
}

type fuzzGateway struct {
	g       *gateway.Gateway
	limiter *sluice.Limiter
}

// newFuzzGateway is a gateway over the tame mock with small models and
// rules that refuse some requests (a budget, a bucket a large n cannot
// fit, a forbidden model for one key).
func newFuzzGateway(f *testing.F) *fuzzGateway {
	upstream := httptest.NewServer(tameMock{mockprovider.New(mockprovider.Options{})})
	f.Cleanup(upstream.Close)
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: []sluice.Rule{
		{Name: "tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1 << 50, Period: sluice.PeriodDay},
		{Name: "bucket", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricOutputTokens, Limit: 1000, Window: time.Millisecond},
		{Name: "cost", Kind: sluice.KindBudget, Subject: "org", Metric: sluice.MetricCost, Limit: 1 << 50, Period: sluice.PeriodDay},
	}})
	if err != nil {
		f.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{
		Limiter: l,
		Keys:    fakeKeys{testKey: {KeyID: "k1", Org: "o1", Workspace: "w1", User: "u1", AllowedModels: []string{"mock-small", "mock-large"}}},
		Models: []gateway.Model{
			{Name: "mock-small", Provider: "mock", Price: sluice.Price{Input: 150_000, Output: 600_000}, MaxOutputTokens: 64, Aliases: []string{"small"}},
			{Name: "mock-large", Provider: "mock", Price: sluice.Price{Input: 3_000_000, Output: 15_000_000}, MaxOutputTokens: 32, Fallbacks: []string{"mock-small"}},
			{Name: "mock-forbidden", Provider: "mock", UpstreamName: "mock-small", MaxOutputTokens: 16},
		},
		Providers:      []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: upstream.URL}},
		MaxBodyBytes:   64 << 10,
		RequestTimeout: 10 * time.Second,
		RetryBase:      time.Millisecond, RetryMax: 2 * time.Millisecond,
	})
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzGateway{g: g, limiter: l}
}

func (fg *fuzzGateway) used(t *testing.T) int64 {
	eff, err := fg.limiter.Effective(context.Background(), sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eff {
		if e.Rule == "tokens" {
			return e.Used
		}
	}
	t.Fatal("no tokens rule")
	return 0
}

// post calls the handler in memory with body on path, and checks the
// answer: no panic, a status the gateway may give, a JSON body (or an SSE
// stream of JSON events), and nothing charged unless admitted.
func (fg *fuzzGateway) post(t *testing.T, path string, body []byte) {
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(path)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.SetContentType("application/json")
	req.SetBody(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	before := fg.used(t)
	var out []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		fg.g.Handler(&ctx)
		out = ctx.Response.Body() // reads a stream to its end
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("no answer after 20s to %q\n%s", body, buf[:runtime.Stack(buf, true)])
	}
	// Settlement runs once the answer is out: wait for it before counting.
	drain, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := fg.g.Drain(drain)
	cancel()
	if err != nil {
		t.Fatalf("settlement of %q did not finish: %v", body, err)
	}
	status := ctx.Response.StatusCode()
	if !fuzzStatuses[status] {
		t.Fatalf("status %d for %q: %s", status, body, out)
	}
	if bytes.HasPrefix(ctx.Response.Header.ContentType(), []byte("text/event-stream")) {
		if status != 200 {
			t.Fatalf("a %d stream", status)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "[DONE]" && !json.Valid([]byte(d)) {
				t.Fatalf("stream event %q is not JSON (request %q)", d, body)
			}
		}
	} else if !json.Valid(out) {
		t.Fatalf("status %d body %q is not JSON (request %q)", status, out, body)
	}
	if status != 200 {
		if after := fg.used(t); after != before {
			t.Fatalf("a %d charged %d tokens (request %q): %s", status, after-before, body, out)
		}
		if path == "/v1/messages" {
			var e errorReply
			if json.Unmarshal(out, &e) != nil || e.Type != "error" || e.Error.Type == "" {
				t.Fatalf("%d body %s is not an Anthropic error", status, out)
			}
		} else {
			var e errorReply
			if json.Unmarshal(out, &e) != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("%d body %s is not an OpenAI error", status, out)
			}
		}
	}
}

var fuzzSeeds = map[string][]string{
	"/v1/chat/completions": {
		`{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"small","stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
		`{"model":"mock-large","stream":true,"stream_options":{"include_usage":true},"n":3,"max_completion_tokens":7,"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`,
		`{"model":"mock-small","n":128,"messages":[{"role":"user","content":"n too large for the bucket"}]}`,
		`{"model":"mock-small","max_tokens":null,"stream_options":null,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"messages":[{"role":"user","content":"\u005bmock status=500]"}]}`,
		`{"model":"mock-forbidden","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"mock-small","max_tokens":-1,"messages":[]}`,
		`{"model":"m\u006fck-small","max_tokens":2147483648,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"mock-small","messages":[{"role":"user","content":"[mock delay=100000 cut=1]"}],"stream":true}`,
		`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`,
		`[1,2,3]`, `{`, ``, `null`, `{"model":"mock-small","messages":[{"role":"user","content":"hi"}]} x`,
	},
	"/v1/responses": {
		`{"model":"mock-small","input":"hi","max_output_tokens":16}`,
		`{"model":"small","stream":true,"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`,
		`{"model":"mock-large","input":""}`,
		`{"model":"mock-small","input":"hi","max_output_tokens":0}`,
	},
	"/v1/embeddings": {
		`{"model":"mock-small","input":"hi"}`,
		`{"model":"mock-small","input":["a","b"]}`,
		`{"model":"mock-small","input":[[1,2,3]]}`,
		`{"model":"mock-small","input":[]}`,
	},
	"/v1/messages": {
		`{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"small","max_tokens":5,"stream":true,"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		`{"model":"mock-large","max_tokens":40,"thinking":{"type":"enabled","budget_tokens":16},"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"mock-small","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"mock-small","messages":[{"role":"user","content":"no max_tokens"}]}`,
	},
}

func fuzzRoute(f *testing.F, path string) {
	fg := newFuzzGateway(f)
	for _, s := range fuzzSeeds[path] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fg.post(t, path, body)
	})
}

func FuzzGateway_Chat(f *testing.F)       { fuzzRoute(f, "/v1/chat/completions") }
func FuzzGateway_Responses(f *testing.F)  { fuzzRoute(f, "/v1/responses") }
func FuzzGateway_Embeddings(f *testing.F) { fuzzRoute(f, "/v1/embeddings") }
func FuzzGateway_Messages(f *testing.F)   { fuzzRoute(f, "/v1/messages") }
