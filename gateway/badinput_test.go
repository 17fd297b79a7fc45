package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// withOtherKinds adds models served by an OpenAI and an Anthropic provider
// (both in front of the mock), so that a route can be called with a model
// whose provider does not speak it.
func withOtherKinds(o *gateway.Options) {
	base := o.Providers[0].BaseURL
	o.Providers = append(slices.Clone(o.Providers),
		gateway.Provider{Name: "oa", Kind: gateway.KindOpenAI, BaseURL: base + "/v1", APIKey: "sk-upstream-openai"},
		gateway.Provider{Name: "an", Kind: gateway.KindAnthropic, BaseURL: base, APIKey: "sk-upstream-anthropic"})
	o.Models = append(slices.Clone(o.Models),
		gateway.Model{Name: "gpt-test", Provider: "oa", UpstreamName: "mock-small", MaxOutputTokens: 4096},
		gateway.Model{Name: "claude-test", Provider: "an", UpstreamName: "mock-small", MaxOutputTokens: 4096})
}

// keyStore is an Authenticator with revoked keys and a key that finds the
// store down.
type keyStore struct {
	fakeKeys
	revoked map[string]bool
}

const (
	revokedKey = "sk-sluice-revoked"
	downKey    = "sk-sluice-store-down"
)

func (k keyStore) Authenticate(ctx context.Context, secret string) (gateway.Principal, error) {
	switch {
	case k.revoked[secret]:
		return gateway.Principal{}, fmt.Errorf("key revoked at %s: %w", time.Unix(0, 0).UTC(), gateway.ErrBadKey)
	case secret == downKey:
		return gateway.Principal{}, errors.New("catalog: database is locked")
	}
	return k.fakeKeys.Authenticate(ctx, secret)
}

// guardRules are counted by every admitted request of the harness's key:
// after bad input, each must still read 0.
var guardRules = []sluice.Rule{
	{Name: "per_key", Kind: sluice.KindRate, Subject: "key", Limit: 1000, Window: time.Minute},
	{Name: "daily_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 10_000_000, Period: sluice.PeriodDay},
	{Name: "daily_cost", Kind: sluice.KindBudget, Subject: "org", Metric: sluice.MetricCost, Limit: 100_000_000, Period: sluice.PeriodDay},
	{Name: "in_flight", Kind: sluice.KindConcurrency, Subject: "workspace", Limit: 10},
}

func TestGateway_BadInputIsRefusedUncharged(t *testing.T) {
	t.Parallel()
	const maxBody = 4096
	h := startHarness(t, setup{rules: guardRules, tweak: []func(*gateway.Options){withOtherKinds, func(o *gateway.Options) {
		o.MaxBodyBytes = maxBody
		o.Keys = keyStore{fakeKeys: o.Keys.(fakeKeys), revoked: map[string]bool{revokedKey: true}}
	}}})
	const (
		chat      = "/v1/chat/completions"
		responses = "/v1/responses"
		embed     = "/v1/embeddings"
		messages  = "/v1/messages"
	)
	chatWith := func(member string) string {
		return `{"model":"mock-small",` + member + `"messages":[{"role":"user","content":"hi"}]}`
	}
	msgWith := func(member string) string {
		return `{"model":"mock-small",` + member + `"messages":[{"role":"user","content":"hi"}]}`
	}
	big := strings.Repeat("x", maxBody)
	cases := []struct {
		name, path, body string
		headers          map[string]string
		status           int
		// param and code are the OpenAI error's ("" for null); anthType is
		// the Anthropic error's type.
		param, code, anthType string
	}{
		{name: "ChatMalformedJSON", path: chat, body: `{"model":"mock-small","messages":[`, status: 400, code: "invalid_request"},
		{name: "ChatNotJSON", path: chat, body: `model=mock-small`, status: 400, code: "invalid_request"},
		{name: "ChatEmptyBody", path: chat, body: ``, status: 400, code: "invalid_request"},
		{name: "ChatJSONArray", path: chat, body: `[{"model":"mock-small"}]`, status: 400, code: "invalid_request"},
		{name: "ChatTrailingGarbage", path: chat, body: chatWith(``) + `{}`, status: 400, code: "invalid_request"},
		{name: "ChatModelNotString", path: chat, body: `{"model":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "model", code: "invalid_request"},
		{name: "ChatMessagesNotArray", path: chat, body: `{"model":"mock-small","messages":"hi"}`, status: 400, param: "messages", code: "invalid_request"},
		{name: "ChatMaxTokensString", path: chat, body: chatWith(`"max_tokens":"10",`), status: 400, param: "max_tokens", code: "invalid_request"},
		{name: "ChatMaxTokensFloat", path: chat, body: chatWith(`"max_tokens":10.5,`), status: 400, param: "max_tokens", code: "invalid_request"},
		{name: "ChatStreamNotBool", path: chat, body: chatWith(`"stream":"yes",`), status: 400, param: "stream", code: "invalid_request"},
		{name: "ChatNZero", path: chat, body: chatWith(`"n":0,`), status: 400, param: "n", code: "invalid_request"},
		{name: "ChatMaxTokensNegative", path: chat, body: chatWith(`"max_tokens":-1,`), status: 400, param: "max_tokens", code: "invalid_request"},
		{name: "ChatMaxTokensZero", path: chat, body: chatWith(`"max_tokens":0,`), status: 400, param: "max_tokens", code: "invalid_request"},
		{name: "ChatMaxTokensBeyond2to31", path: chat, body: chatWith(`"max_tokens":2147483648,`), status: 400, param: "max_tokens", code: "invalid_request"},
		{name: "ChatMaxTokensBeyondInt64", path: chat, body: chatWith(`"max_tokens":99999999999999999999999,`), status: 400, param: "max_tokens", code: "invalid_request"},
		{name: "ChatMaxTokensExponent", path: chat, body: chatWith(`"max_tokens":1e40,`), status: 400, param: "max_tokens", code: "invalid_request"},
		{name: "ChatMaxCompletionTokensNegative", path: chat, body: chatWith(`"max_completion_tokens":-5,`), status: 400, param: "max_completion_tokens", code: "invalid_request"},
		{name: "ChatUnknownModel", path: chat, body: `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, status: 404, param: "model", code: "model_not_found"},
		{name: "ChatEmptyMessages", path: chat, body: `{"model":"mock-small","messages":[]}`, status: 400, param: "messages", code: "invalid_request"},
		{name: "ChatMissingMessages", path: chat, body: `{"model":"mock-small"}`, status: 400, param: "messages", code: "invalid_request"},
		{name: "ChatMissingModel", path: chat, body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "model", code: "invalid_request"},
		{name: "ChatEmptyModel", path: chat, body: `{"model":"","messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "model", code: "invalid_request"},
		{name: "ChatDuplicateModel", path: chat, body: `{"model":"mock-small","model":"mock-large","messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "model", code: "invalid_request"},
		{name: "ChatModelOfOtherAPI", path: chat, body: `{"model":"claude-test","messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "model", code: "wrong_api"},
		{name: "ChatBodyOverCap", path: chat, body: chatWith(`"user":"` + big + `",`), status: 413, code: "request_too_large"},

		{name: "ResponsesMalformedJSON", path: responses, body: `{"model":"mock-small","input":"hi"`, status: 400, code: "invalid_request"},
		{name: "ResponsesMissingInput", path: responses, body: `{"model":"mock-small"}`, status: 400, param: "input", code: "invalid_request"},
		{name: "ResponsesEmptyInput", path: responses, body: `{"model":"mock-small","input":[]}`, status: 400, param: "input", code: "invalid_request"},
		{name: "ResponsesMaxOutputZero", path: responses, body: `{"model":"mock-small","input":"hi","max_output_tokens":0}`, status: 400, param: "max_output_tokens", code: "invalid_request"},
		{name: "ResponsesMaxOutputNegative", path: responses, body: `{"model":"mock-small","input":"hi","max_output_tokens":-3}`, status: 400, param: "max_output_tokens", code: "invalid_request"},
		{name: "ResponsesMaxOutputBeyond2to31", path: responses, body: `{"model":"mock-small","input":"hi","max_output_tokens":4294967296}`, status: 400, param: "max_output_tokens", code: "invalid_request"},
		{name: "ResponsesUnknownModel", path: responses, body: `{"model":"o9","input":"hi"}`, status: 404, param: "model", code: "model_not_found"},

		{name: "EmbeddingsMissingInput", path: embed, body: `{"model":"mock-small"}`, status: 400, param: "input", code: "invalid_request"},
		{name: "EmbeddingsEmptyString", path: embed, body: `{"model":"mock-small","input":""}`, status: 400, param: "input", code: "invalid_request"},
		{name: "EmbeddingsWrongType", path: embed, body: `{"model":"mock-small","input":{"text":"hi"}}`, status: 400, param: "input", code: "invalid_request"},
		{name: "EmbeddingsUnknownModel", path: embed, body: `{"model":"text-embedding-9","input":"hi"}`, status: 404, param: "model", code: "model_not_found"},

		{name: "MessagesMalformedJSON", path: messages, body: `{"model":"mock-small","max_tokens":5,`, status: 400, anthType: "invalid_request_error"},
		{name: "MessagesMaxTokensNegative", path: messages, body: msgWith(`"max_tokens":-1,`), status: 400, anthType: "invalid_request_error"},
		{name: "MessagesMaxTokensZero", path: messages, body: msgWith(`"max_tokens":0,`), status: 400, anthType: "invalid_request_error"},
		{name: "MessagesMaxTokensBeyond2to31", path: messages, body: msgWith(`"max_tokens":2147483648,`), status: 400, anthType: "invalid_request_error"},
		{name: "MessagesMaxTokensString", path: messages, body: msgWith(`"max_tokens":"5",`), status: 400, anthType: "invalid_request_error"},
		{name: "MessagesEmptyMessages", path: messages, body: `{"model":"mock-small","max_tokens":5,"messages":[]}`, status: 400, anthType: "invalid_request_error"},
		{name: "MessagesMissingModel", path: messages, body: `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, anthType: "invalid_request_error"},
		{name: "MessagesSystemWrongType", path: messages, body: msgWith(`"max_tokens":5,"system":7,`), status: 400, anthType: "invalid_request_error"},
		{name: "MessagesUnknownModel", path: messages, body: `{"model":"claude-9","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 404, anthType: "not_found_error"},
		{name: "MessagesModelOfOpenAIProvider", path: messages, body: `{"model":"gpt-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, anthType: "invalid_request_error"},
		{name: "MessagesBodyOverCap", path: messages, body: msgWith(`"max_tokens":5,"system":"` + big + `",`), status: 413, anthType: "request_too_large"},

		{name: "NoKey", path: chat, body: chatWith(``), headers: map[string]string{"Authorization": ""}, status: 401, code: "invalid_api_key"},
		{name: "NoKeyMessages", path: messages, body: msgWith(`"max_tokens":5,`), headers: map[string]string{"x-api-key": ""}, status: 401, anthType: "authentication_error"},
		{name: "KeyOfAnotherFormat", path: chat, body: chatWith(``), headers: map[string]string{"Authorization": "Bearer sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA"}, status: 401, code: "invalid_api_key"},
		{name: "KeyOfAnotherFormatInXAPIKey", path: messages, body: msgWith(`"max_tokens":5,`), headers: map[string]string{"x-api-key": "sk-proj-0123456789abcdef"}, status: 401, anthType: "authentication_error"},
		{name: "BasicAuth", path: chat, body: chatWith(``), headers: map[string]string{"Authorization": "Basic " + "c2stc2x1aWNlLXRlc3Qta2V5Og=="}, status: 401, code: "invalid_api_key"},
		{name: "KeyWithSuffix", path: chat, body: chatWith(``), headers: map[string]string{"Authorization": "Bearer " + testKey + "x"}, status: 401, code: "invalid_api_key"},
		{name: "KeyInBodyOnly", path: chat, body: chatWith(`"api_key":"` + testKey + `",`), headers: map[string]string{"Authorization": ""}, status: 401, code: "invalid_api_key"},
		{name: "RevokedKey", path: chat, body: chatWith(``), headers: map[string]string{"Authorization": "Bearer " + revokedKey}, status: 401, code: "invalid_api_key"},
		{name: "RevokedKeyMessages", path: messages, body: msgWith(`"max_tokens":5,`), headers: map[string]string{"x-api-key": revokedKey}, status: 401, anthType: "authentication_error"},
		{name: "KeyStoreDown", path: chat, body: chatWith(``), headers: map[string]string{"Authorization": "Bearer " + downKey}, status: 503, code: "key_store_unavailable"},

		{name: "ModelNotAllowedForKey", path: chat, body: `{"model":"mock-large","messages":[{"role":"user","content":"hi"}]}`,
			headers: map[string]string{"Authorization": "Bearer sk-sluice-other"}, status: 403, param: "model", code: "model_not_allowed"},
		{name: "ModelNotAllowedForKeyMessages", path: messages, body: `{"model":"mock-large","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
			headers: map[string]string{"x-api-key": "sk-sluice-other"}, status: 403, anthType: "permission_error"},

		{name: "UnknownRoute", path: "/v1/completions", body: chatWith(``), status: 404, code: "not_found"},
		{name: "UnknownMessagesRoute", path: "/v1/messages/batches", body: msgWith(`"max_tokens":5,`), status: 404, anthType: "not_found_error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.post(c.path, c.body, c.headers)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if c.anthType != "" {
				if e := anthropicError(t, r); e.Error.Type != c.anthType {
					t.Errorf("error type %q, want %q: %s", e.Error.Type, c.anthType, r.body)
				}
			} else {
				e := openaiError(t, r)
				if got := deref(e.Error.Param); got != c.param {
					t.Errorf("param %q, want %q: %s", got, c.param, r.body)
				}
				if got := deref(e.Error.Code); got != c.code {
					t.Errorf("code %q, want %q: %s", got, c.code, r.body)
				}
			}
			switch c.status {
			case 413:
				if r.header.Get("x-should-retry") != "false" {
					t.Errorf("413 without x-should-retry: false: %v", r.header)
				}
			case 503:
				if r.header.Get("Retry-After") != "1" {
					t.Errorf("503 with Retry-After %q, want 1", r.header.Get("Retry-After"))
				}
			default:
				if r.header.Get("Retry-After") != "" || r.header.Get("x-should-retry") != "" {
					t.Errorf("a %d carries a retry signal: %v", c.status, r.header)
				}
			}
			for _, rule := range []string{"per_key", "daily_tokens", "daily_cost", "in_flight"} {
				if used := h.used(rule); used != 0 {
					t.Errorf("rule %s charged %d", rule, used)
				}
			}
			if n := h.mockCalls(); n != 0 {
				t.Errorf("the provider received %d requests", n)
			}
		})
	}
	t.Run("ChunkedBodyOverCap", func(t *testing.T) {
		// No Content-Length: the cap is found while reading.
		body := io.MultiReader(strings.NewReader(chatWith(`"user":"`)), strings.NewReader(big+big), strings.NewReader(`",`))
		req, _ := http.NewRequest(http.MethodPost, h.url+chat, body)
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		r := reply{status: resp.StatusCode, header: resp.Header, body: b}
		if req.ContentLength != 0 || r.status != 413 || r.header.Get("x-should-retry") != "false" {
			t.Fatalf("status %d (content length %d), headers %v: %s", r.status, req.ContentLength, r.header, b)
		}
		openaiError(t, r)
		if n := h.mockCalls(); n != 0 {
			t.Errorf("the provider received %d requests", n)
		}
	})
	t.Run("WrongMethod", func(t *testing.T) {
		for _, path := range []string{chat, messages} {
			req, _ := http.NewRequest(http.MethodGet, h.url+path, nil)
			req.Header.Set("Authorization", "Bearer "+testKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r := reply{status: resp.StatusCode, header: resp.Header, body: b}
			if r.status != 405 || r.header.Get("Allow") != "POST" {
				t.Fatalf("GET %s: status %d, Allow %q", path, r.status, r.header.Get("Allow"))
			}
			if path == messages {
				anthropicError(t, r)
			} else {
				openaiError(t, r)
			}
		}
	})
	// Still serving after all of that, and the good request is charged.
	r := h.post(chat, chatWith(`"max_tokens":5,`), nil)
	if r.status != 200 {
		t.Fatalf("a good request after the bad ones: %d %s", r.status, r.body)
	}
	if h.used("per_key") != 1 || h.mockCalls() != 1 {
		t.Fatalf("the good request was not counted: per_key %d, provider %d", h.used("per_key"), h.mockCalls())
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestGateway_IdentityHeadersDoNotChangeWhoPays sends headers and body
// members that claim another identity: the counters charged are those of
// the key's record.
func TestGateway_IdentityHeadersDoNotChangeWhoPays(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "per_user", Kind: sluice.KindBudget, Subject: "workspace+user", Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_org", Kind: sluice.KindBudget, Subject: "org", Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_team", Kind: sluice.KindBudget, Subject: "team", Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_key", Kind: sluice.KindBudget, Subject: "key", Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_ip", Kind: sluice.KindBudget, Subject: "ip", Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_tier", Kind: sluice.KindBudget, Subject: "tier", Limit: 100, Period: sluice.PeriodDay},
	}
	h := newHarness(t, rules)
	spoof := map[string]string{
		"X-Sluice-User": "u9", "X-Sluice-Workspace": "w9", "X-Sluice-Org": "o9", "X-Sluice-Team": "t9",
		"X-Sluice-Key": "k9", "X-Sluice-Tier": "enterprise", "X-Sluice-Identity": `{"workspace":"w9"}`,
		"OpenAI-Organization": "o9", "OpenAI-Project": "w9", "X-Forwarded-For": "10.9.9.9", "X-Real-IP": "10.9.9.9",
		"Forwarded": "for=10.9.9.9", "anthropic-workspace": "w9",
	}
	calls := []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"mock-small","max_tokens":3,"user":"u9","metadata":{"workspace":"w9"},"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"model":"mock-small","max_tokens":3,"metadata":{"user_id":"u9"},"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, c := range calls {
		if r := h.post(c.path, c.body, spoof); r.status != 200 {
			t.Fatalf("%s: %d %s", c.path, r.status, r.body)
		}
	}
	real := sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1", IP: "127.0.0.1"}
	claimed := sluice.Identity{Org: "o9", Workspace: "w9", User: "u9", Team: "t9", Key: "k9", IP: "10.9.9.9", Tier: "enterprise"}
	for _, rule := range rules {
		if got := h.usedBy(real, rule.Name); got != 2 {
			t.Errorf("rule %s charged %d to the key's identity, want 2", rule.Name, got)
		}
		if got := h.usedBy(claimed, rule.Name); got != 0 {
			t.Errorf("rule %s charged %d to the identity the headers claimed", rule.Name, got)
		}
	}
}

// TestGateway_ServerErrorsGoToTheLog: what the HTTP server says about a
// body over the cap goes to the gateway's structured log, not to stderr.
func TestGateway_ServerErrorsGoToTheLog(t *testing.T) {
	t.Parallel()
	var logged syncbuf.Buffer
	h := newHarness(t, nil, func(o *gateway.Options) {
		o.MaxBodyBytes = 1024
		o.Logger = slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	r := h.post("/v1/chat/completions", `{"model":"mock-small","messages":[{"role":"user","content":"`+strings.Repeat("x", 2048)+`"}]}`, nil)
	if r.status != 413 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	eventually(t, "the server's message in the log", func() bool {
		return strings.Contains(logged.String(), `"level":"DEBUG","msg":"http server"`) && strings.Contains(logged.String(), "body size exceeds")
	})
}

// A request with both Content-Length and Transfer-Encoding is refused
// (request smuggling), whichever comes first.
func TestGateway_LengthAndChunkedRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, headers := range []string{
		"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
		"Transfer-Encoding: chunked\r\ncontent-length: 5\r\n",
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		body := `{"model":"mock-small","messages":[{"role":"user","content":"hi"}]}`
		req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + testKey + "\r\n" + headers +
			"\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "Content-Length and Transfer-Encoding") || !resp.Close {
			t.Errorf("%q: %d %s (close %v), want 400 and the connection closed", headers, resp.StatusCode, b, resp.Close)
		}
	}
	if n := h.mockCalls(); n != 0 {
		t.Fatalf("the provider was called %d times", n)
	}
}

// Listener caps the connections of one client address: past MaxConnsPerIP
// a new connection is answered 429 at once, in the API's error shape with
// Retry-After, and served again once one closes; past MaxConns, 503 alike.
func TestGateway_ConnectionsCappedInTheAPIsShape(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(o *gateway.Options) { o.MaxConns, o.MaxConnsPerIP = 3, 2 })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := h.gw.Server()
	go func() { _ = srv.Serve(h.gw.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	addr := ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func() (int, http.Header, []byte) {
		resp, err := client.Post("http://"+addr+"/healthz", "text/plain", nil)
		if err != nil {
			return 0, nil, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	var held []net.Conn
	// hold opens a connection that is served (it answers a request) and
	// stays open; a place freed by a connection the server is still
	// closing may take a moment to come back.
	hold := func() {
		eventually(t, "a connection served", func() bool {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
				c.Close()
				return false
			}
			held = append(held, c)
			return true
		})
	}
	hold()
	hold()
	status, header, body := call()
	if status != 429 || header.Get("Retry-After") != "1" || !strings.Contains(string(body), `"code":"too_many_connections_per_address"`) {
		t.Fatalf("a third connection from the address: %d %v %s, want 429 in the API's shape with Retry-After", status, header, body)
	}
	held[0].Close()
	eventually(t, "a place back once a connection closed", func() bool { s, _, _ := call(); return s == 200 })

	// The whole cap, from other addresses on loopback: 127.0.0.2 takes the
	// third place, 127.0.0.3 finds none.
	hold()
	from := func(ip byte) *http.Response {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, ip)}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	eventually(t, "the third place, from another address", func() bool { return from(2).StatusCode == 200 })
	resp := from(3)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"code":"too_many_connections"`) {
		t.Fatalf("past MaxConns: %d %v %s, want 503 in the API's shape with Retry-After", resp.StatusCode, resp.Header, b)
	}
	for _, c := range held {
		c.Close()
	}
	// Each refusal is told to the Observer (logged and counted), as a
	// throttle: per address rate_limited, over the whole cap busy.
	eventually(t, "the refusals observed", func() bool {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		seen := map[string]bool{}
		for _, e := range h.rec.events {
			seen[fmt.Sprintf("%d %s %s", e.Status, e.Outcome, e.Class)] = true
		}
		return seen["429 rate_limited throttled"] && seen["503 busy throttled"]
	})
}
