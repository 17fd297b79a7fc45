package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/internal/testenv"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// headerTap is a provider in front of the mock that keeps the headers of
// the last request it was sent.
type headerTap struct {
	mock *mockprovider.Server
	mu   sync.Mutex
	last http.Header
}

func (h *headerTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.last = r.Header.Clone()
	h.mu.Unlock()
	h.mock.ServeHTTP(w, r)
}

func (h *headerTap) header(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last.Get(name)
}

// tracedHarness is a harness whose gateway traces into exp, in front of a
// headerTap.
func tracedHarness(t *testing.T, traced bool) (*harness, *tracetest.InMemoryExporter, *headerTap) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	tap := &headerTap{mock: mockprovider.New(mockprovider.Options{})}
	up := httptest.NewServer(tap)
	t.Cleanup(up.Close)
	h := newHarness(t, []sluice.Rule{dailyTokens}, func(o *gateway.Options) {
		if traced {
			o.TracerProvider = tp
		}
		o.Providers = []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: up.URL}}
	})
	return h, exp, tap
}

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// spansByName indexes the ended spans by name, failing on a duplicate.
func spansByName(t *testing.T, exp *tracetest.InMemoryExporter) map[string]tracetest.SpanStub {
	t.Helper()
	out := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if _, dup := out[s.Name]; dup {
			t.Fatalf("two spans named %q", s.Name)
		}
		out[s.Name] = s
	}
	return out
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func hasEvent(s tracetest.SpanStub, name string) bool {
	for _, e := range s.Events {
		if e.Name == name {
			return true
		}
	}
	return false
}

// A traced call continues the client's trace: a server span per request,
// its children for authentication, admission, the upstream call (with the
// GenAI attributes and an event at the first token) and settlement; the
// upstream request carries the upstream span's traceparent and the
// request's ID.
func TestTrace_SpansContinueTheClientsTrace(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		name := "whole"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			h, exp, tap := tracedHarness(t, true)
			body := `{"model":"small","max_tokens":8,"messages":[{"role":"user","content":"hello there"}]}`
			if stream {
				body = `{"model":"small","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hello there"}]}`
			}
			r := h.post("/v1/chat/completions", body, map[string]string{"traceparent": clientParent, "tracestate": "vendor=1", "X-Request-Id": "trace-1"})
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			ev := h.rec.waitEvents(t, 1)[0]
			if stream != (ev.FirstToken > 0) || ev.FirstToken > ev.Duration || ev.UpstreamStatus != 200 {
				t.Errorf("event first token %v of %v, upstream status %d", ev.FirstToken, ev.Duration, ev.UpstreamStatus)
			}
			spans := spansByName(t, exp)
			root, ok := spans["POST /v1/chat/completions"]
			if !ok {
				t.Fatalf("no request span among %v", spans)
			}
			if root.SpanKind != trace.SpanKindServer || root.SpanContext.TraceID().String() != clientTraceID || root.Parent.SpanID().String() != clientSpanID {
				t.Fatalf("request span kind %v trace %s parent %s, want a server span continuing the client's", root.SpanKind, root.SpanContext.TraceID(), root.Parent.SpanID())
			}
			if v, _ := attrOf(root, "sluice.request_id"); v.AsString() != "trace-1" {
				t.Errorf("request span's request id %q", v.AsString())
			}
			if v, _ := attrOf(root, "http.response.status_code"); v.AsInt64() != 200 {
				t.Errorf("request span's status %v", v)
			}
			for _, child := range []string{"sluice.authenticate", "sluice.admit", "chat mock-small", "sluice.settle"} {
				s, ok := spans[child]
				if !ok {
					t.Fatalf("no span %q among %v", child, spans)
				}
				if s.Parent.SpanID() != root.SpanContext.SpanID() {
					t.Errorf("span %q is not a child of the request's", child)
				}
			}
			up := spans["chat mock-small"]
			if up.SpanKind != trace.SpanKindClient || !hasEvent(up, "gen_ai.first_token") {
				t.Errorf("upstream span kind %v events %v, want a client span with the first token", up.SpanKind, up.Events)
			}
			want := map[string]string{"gen_ai.provider.name": "mock", "gen_ai.system": "mock", "gen_ai.request.model": "small",
				"gen_ai.response.model": "mock-small", "gen_ai.operation.name": "chat"}
			for k, w := range want {
				if v, _ := attrOf(up, k); v.AsString() != w {
					t.Errorf("upstream span %s = %q, want %q", k, v.AsString(), w)
				}
			}
			for _, k := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
				if v, ok := attrOf(up, k); !ok || v.AsInt64() <= 0 {
					t.Errorf("upstream span %s = %v, want the usage reported", k, v)
				}
				if v, ok := attrOf(root, k); !ok || v.AsInt64() <= 0 {
					t.Errorf("request span %s = %v, want the usage charged", k, v)
				}
			}
			wantParent := "00-" + clientTraceID + "-" + up.SpanContext.SpanID().String() + "-01"
			if got := tap.header("traceparent"); got != wantParent {
				t.Errorf("upstream traceparent %q, want the upstream span's %q", got, wantParent)
			}
			if got := tap.header("tracestate"); got != "vendor=1" {
				t.Errorf("upstream tracestate %q, want the client's", got)
			}
			if got := tap.header("X-Request-Id"); got != "trace-1" {
				t.Errorf("upstream X-Request-Id %q, want the request's", got)
			}
		})
	}
}

// A refused call's request span says why; nothing is sent upstream.
func TestTrace_RefusalMarksTheSpan(t *testing.T) {
	t.Parallel()
	h, exp, _ := tracedHarness(t, true)
	r := h.post("/v1/chat/completions", `{"model":"small","messages":[]}`, map[string]string{"Authorization": "Bearer sk-wrong"})
	if r.status != 401 {
		t.Fatalf("status %d", r.status)
	}
	h.rec.waitEvents(t, 1)
	spans := spansByName(t, exp)
	root := spans["POST /v1/chat/completions"]
	if v, _ := attrOf(root, "sluice.outcome"); v.AsString() != "unauthorized" || root.Status.Description != "invalid_api_key" {
		t.Errorf("request span outcome %q status %+v", v.AsString(), root.Status)
	}
	if _, ok := spans["sluice.authenticate"]; !ok || len(spans) != 2 {
		t.Errorf("spans %v, want the request's and authentication's only", spans)
	}
}

// With tracing off the client's trace context goes upstream as it came,
// and no span is made.
func TestTrace_OffPassesTraceContextOn(t *testing.T) {
	t.Parallel()
	h, exp, tap := tracedHarness(t, false)
	r := h.post("/v1/chat/completions", `{"model":"small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"traceparent": clientParent})
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	h.rec.waitEvents(t, 1)
	if got := tap.header("traceparent"); got != clientParent {
		t.Errorf("upstream traceparent %q, want the client's", got)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans with tracing off", n)
	}
}

// Anthropic-shaped answers carry the request's ID as request-id too (the
// Anthropic SDKs read it), and the provider's own as X-Upstream-Request-Id.
func TestGateway_AnthropicRequestID(t *testing.T) {
	t.Parallel()
	h, _, _ := tracedHarness(t, false)
	r := h.post("/v1/messages", `{"model":"small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"X-Request-Id": "anth-1", "anthropic-version": "2023-06-01"})
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if r.header.Get("request-id") != "anth-1" || r.header.Get("X-Request-Id") != "anth-1" {
		t.Errorf("request-id %q, X-Request-Id %q, want the client's", r.header.Get("request-id"), r.header.Get("X-Request-Id"))
	}
	if r := h.post("/v1/chat/completions", `{`, nil); r.header.Get("request-id") != "" {
		t.Errorf("an OpenAI-shaped answer has request-id %q", r.header.Get("request-id"))
	}
}

// A provider that cannot be reached: the client is told so without its
// address, the event (and so the log line) keeps the cause.
func TestGateway_UpstreamCauseLoggedNotSent(t *testing.T) {
	t.Parallel()
	addr := testenv.RefusedAddr(t) // held, so no other test can listen there
	h := newHarness(t, []sluice.Rule{dailyTokens}, func(o *gateway.Options) {
		o.Providers = []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: "http://" + addr}}
		o.UpstreamRetries = -1
	})
	r := h.post("/v1/chat/completions", `{"model":"small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 502 || strings.Contains(string(r.body), addr) || strings.Contains(string(r.body), "127.0.0.1") {
		t.Fatalf("status %d body %s, want 502 without the provider's address", r.status, r.body)
	}
	ev := h.rec.waitEvents(t, 1)[0]
	if ev.Cause == nil || !strings.Contains(ev.Cause.Error(), "upstream_error") || !strings.Contains(ev.Cause.Error(), addr) {
		t.Fatalf("event cause %v, want the code and the connection error", ev.Cause)
	}
	if ev.Provider != "mock" || ev.UpstreamStatus != 0 {
		t.Errorf("event provider %q upstream status %d", ev.Provider, ev.UpstreamStatus)
	}
}

// failingKeys is a key store that cannot answer.
type failingKeys struct{ err error }

func (k failingKeys) Authenticate(context.Context, string) (gateway.Principal, error) {
	return gateway.Principal{}, k.err
}

// A key store that fails: 503 key_store_unavailable to the client, with
// nothing of the store's error; the event keeps it for the log.
func TestGateway_KeyStoreCauseKept(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens}, func(o *gateway.Options) {
		o.Keys = failingKeys{err: errors.New("dial tcp 10.1.2.3:5432: connection refused")}
	})
	r := h.post("/v1/chat/completions", `{"model":"small","messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 503 || strings.Contains(string(r.body), "10.1.2.3") {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	ev := h.rec.waitEvents(t, 1)[0]
	if ev.Cause == nil || ev.Cause.Error() != "key_store_unavailable: key store: dial tcp 10.1.2.3:5432: connection refused" {
		t.Fatalf("event cause %v", ev.Cause)
	}
}
