package mockprovider

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/openai"
)

func chatReq(content string, stream bool) string {
	s := ""
	if stream {
		s = `"stream":true,`
	}
	return `{"model":"mock-small",` + s + `"max_tokens":20,"messages":[{"role":"user","content":"` + content + `"}]}`
}

func messagesReq(content string, stream bool) string {
	s := ""
	if stream {
		s = `"stream":true,`
	}
	return `{"model":"mock-small",` + s + `"max_tokens":20,"messages":[{"role":"user","content":"` + content + `"}]}`
}

func TestServer_ErrorAnswers(t *testing.T) {
	_, ts := start(t, Options{})
	type check func(t *testing.T, resp *http.Response, body []byte)
	openaiErr := func(typ, code, param string) check {
		return func(t *testing.T, _ *http.Response, body []byte) {
			want := string(openai.ErrorBody("", typ, code, param, nil))
			want = want[strings.Index(want, `"type"`):]
			if !strings.Contains(string(body), want) {
				t.Errorf("body %s lacks %s", body, want)
			}
		}
	}
	anthropicErr := func(typ string) check {
		return func(t *testing.T, _ *http.Response, body []byte) {
			if !strings.HasPrefix(string(body), `{"type":"error","error":{"type":"`+typ+`"`) {
				t.Errorf("body %s, want type %s", body, typ)
			}
		}
	}
	cases := []struct {
		name, path, body string
		status           int
		check            check
	}{
		{"ChatStatus429", "/v1/chat/completions", chatReq("[mock status=429]", false), 429, func(t *testing.T, resp *http.Response, body []byte) {
			if resp.Header.Get("Retry-After") != "1" {
				t.Errorf("retry-after %q", resp.Header.Get("Retry-After"))
			}
			openaiErr("requests", "rate_limit_exceeded", "")(t, resp, body)
		}},
		{"ChatStatus503Streaming", "/v1/chat/completions", chatReq("[mock status=503]", true), 503, openaiErr("server_error", "", "")},
		{"ChatQuota", "/v1/chat/completions", chatReq("[mock quota]", false), 429, func(t *testing.T, _ *http.Response, body []byte) {
			if llm.QuotaCode(429, true, body) == "" {
				t.Errorf("not a quota error: %s", body)
			}
		}},
		{"ChatUnknownModel", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, openaiErr("invalid_request_error", "model_not_found", "")},
		{"ChatBadRequest", "/v1/chat/completions", `{"model":"mock-small","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, 400, openaiErr("invalid_request_error", "", "max_tokens")},
		{"ResponsesStatus500", "/v1/responses", `{"model":"mock-small","input":"[mock status=500]"}`, 500, openaiErr("server_error", "", "")},
		{"EmbeddingsQuota", "/v1/embeddings", `{"model":"mock-small","input":"[mock quota]"}`, 429, func(t *testing.T, _ *http.Response, body []byte) {
			if llm.QuotaCode(429, true, body) == "" {
				t.Errorf("not a quota error: %s", body)
			}
		}},
		{"MessagesStatus529", "/v1/messages", messagesReq("[mock status=529]", true), 529, anthropicErr("overloaded_error")},
		{"MessagesStatus429", "/v1/messages", messagesReq("[mock status=429]", false), 429, anthropicErr("rate_limit_error")},
		{"MessagesQuota", "/v1/messages", messagesReq("[mock quota]", false), 400, func(t *testing.T, _ *http.Response, body []byte) {
			if llm.QuotaCode(400, true, body) == "" {
				t.Errorf("not a quota error: %s", body)
			}
		}},
		{"MessagesUnknownModel", "/v1/messages", `{"model":"claude-x","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, 404, anthropicErr("not_found_error")},
		{"MessagesBadRequest", "/v1/messages", `{"model":"mock-small","messages":[]}`, 400, anthropicErr("invalid_request_error")},
		{"UnknownPath", "/v1/nothing", `{}`, 404, openaiErr("invalid_request_error", "unknown_url", "")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := post(t, context.Background(), ts.URL+c.path, c.body)
			body := readAll(t, resp)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			c.check(t, resp, body)
		})
	}
}

func TestServer_DelayDirective(t *testing.T) {
	_, ts := start(t, Options{Latency: 2 * time.Millisecond})
	began := time.Now()
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", chatReq("[mock delay=30 tokens=1]", false))
	readAll(t, resp)
	if took := time.Since(began); took < 32*time.Millisecond || took > 5*time.Second {
		t.Errorf("took %v, want about 32ms", took)
	}
}

func TestServer_CutDropsStreamWithoutUsage(t *testing.T) {
	cases := []struct {
		name, path, body string
		contentEvent     func(name, data string) bool
	}{
		{"Chat", "/v1/chat/completions", `{"model":"mock-small","stream":true,"stream_options":{"include_usage":true},"max_tokens":20,"messages":[{"role":"user","content":"[mock cut=3]"}]}`,
			func(_, data string) bool { return strings.Contains(data, `"delta":{"content":"`) }},
		{"Responses", "/v1/responses", `{"model":"mock-small","stream":true,"max_output_tokens":20,"input":"[mock cut=3]"}`,
			func(name, _ string) bool { return name == "response.output_text.delta" }},
		{"Messages", "/v1/messages", messagesReq("[mock cut=3]", true),
			func(name, _ string) bool { return name == "content_block_delta" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ended := make(chan Outcome, 1)
			s, ts := start(t, Options{OnStreamEnd: func(_ Route, o Outcome) { ended <- o }})
			evs, err := events(t, post(t, context.Background(), ts.URL+c.path, c.body))
			if err == nil {
				t.Fatalf("stream ended cleanly after %q", evs)
			}
			content := 0
			for _, e := range evs {
				if c.contentEvent(e[0], e[1]) {
					content++
				}
				if strings.Contains(e[1], `"usage":{`) && !strings.Contains(e[0], "message_start") {
					t.Errorf("usage sent before the cut: %s", e[1])
				}
			}
			if content != 3 {
				t.Errorf("%d content events, want 3", content)
			}
			if o := <-ended; o != Cut || s.Stats().StreamsCut != 1 {
				t.Errorf("outcome %v, stats %+v", o, s.Stats())
			}
		})
	}
}

func TestServer_CountsCancelledStreams(t *testing.T) {
	ended := make(chan Outcome, 1)
	s, ts := start(t, Options{ChunkInterval: 2 * time.Millisecond, OnStreamEnd: func(_ Route, o Outcome) { ended <- o }})
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, ts.URL+"/v1/chat/completions", `{"model":"mock-small","stream":true,"max_tokens":5000,"messages":[{"role":"user","content":"x"}]}`)
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, buf, len(buf)); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case o := <-ended:
		if o != Cancelled {
			t.Errorf("outcome %v, want Cancelled", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not notice the client going away")
	}
	st := s.Stats()
	if st.StreamsCancelled != 1 || st.StreamsCompleted != 0 || st.Requests[RouteChat] != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestServer_CancelledDuringDelay(t *testing.T) {
	ended := make(chan Outcome, 1)
	_, ts := start(t, Options{OnStreamEnd: func(_ Route, o Outcome) { ended <- o }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/messages", strings.NewReader(messagesReq("[mock delay=10000]", true)))
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	select {
	case o := <-ended:
		if o != Cancelled {
			t.Errorf("outcome %v", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome")
	}
}

func TestServer_ModelsAndStats(t *testing.T) {
	s, ts := start(t, Options{})
	for _, c := range []struct{ header, want string }{
		{"", `{"object":"list","data":[{"id":"mock-small","object":"model"`},
		{"2023-06-01", `{"data":[{"type":"model","id":"mock-small"`},
	} {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/models", nil)
		if c.header != "" {
			req.Header.Set("anthropic-version", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); !strings.HasPrefix(string(body), c.want) {
			t.Errorf("models %s", body)
		}
	}
	readAll(t, post(t, context.Background(), ts.URL+"/v1/embeddings", `{"model":"mock-small","input":"x"}`))
	readAll(t, post(t, context.Background(), ts.URL+"/v1/messages", messagesReq("x", true)))
	st := s.Stats()
	want := [numRoutes]int64{RouteModels: 2, RouteEmbeddings: 1, RouteMessages: 1}
	if st.Requests != want || st.StreamsCompleted != 1 {
		t.Errorf("stats %+v", st)
	}
	if RouteChat.String() != "chat" || Route(99).String() != "unknown" {
		t.Error("route names")
	}
}

func TestDirectives_Scan(t *testing.T) {
	cases := []struct {
		text string
		want directives
	}{
		{"no directive", directives{tokens: -1, cut: -1}},
		{"[mock tokens=5] and [mock delay=20 status=429]", directives{tokens: 5, cut: -1, delay: 20 * time.Millisecond, status: 429}},
		{"[mock quota cut=0]", directives{tokens: -1, cut: 0, quota: true}},
		{"[mock tokens=-3 status=9999 cut=x]", directives{tokens: -1, cut: -1}},
		{"[mock tokens=5", directives{tokens: -1, cut: -1}},
	}
	for _, c := range cases {
		d := directives{tokens: -1, cut: -1}
		d.scan([]byte(c.text))
		if d != c.want {
			t.Errorf("%q: %+v, want %+v", c.text, d, c.want)
		}
	}
}

func TestAppendTokens_Cycles(t *testing.T) {
	all := string(appendTokens(nil, 0, int64(2*len(words)+3)))
	if !strings.HasPrefix(all, cycleText+cycleText+" lorem ipsum dolor") || len(all) != 2*len(cycleText)+len(" lorem ipsum dolor") {
		t.Errorf("tokens %q", all)
	}
	if got := string(appendTokens(nil, 31, 34)); got != " ea lorem ipsum" {
		t.Errorf("tokens 31..34 = %q", got)
	}
}
