package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/valyala/fasthttp"
)

// testKey is the API key every harness accepts, for workspace w1, user u1.
const testKey = "sk-sluice-test-key"

type fakeKeys map[string]gateway.Principal

func (k fakeKeys) Authenticate(_ context.Context, secret string) (gateway.Principal, error) {
	p, ok := k[secret]
	if !ok {
		return gateway.Principal{}, gateway.ErrBadKey
	}
	return p, nil
}

// recorder keeps the usage records and events of a gateway.
type recorder struct {
	mu      sync.Mutex
	records []gateway.UsageRecord
	events  []gateway.Event
}

func (r *recorder) RecordUsage(u gateway.UsageRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, u)
}

func (r *recorder) observe(e gateway.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) usage() []gateway.UsageRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gateway.UsageRecord(nil), r.records...)
}

// waitUsage waits until n usage records arrived (streams settle after the
// handler returns).
func (r *recorder) waitUsage(t *testing.T, n int) []gateway.UsageRecord {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if u := r.usage(); len(u) >= n {
			return u
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("got %d usage records, want %d", len(r.usage()), n)
	return nil
}

// waitEvents waits until n events arrived and returns them.
func (r *recorder) waitEvents(t *testing.T, n int) []gateway.Event {
	t.Helper()
	var events []gateway.Event
	eventually(t, fmt.Sprintf("%d events", n), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		events = append(events[:0], r.events...)
		return len(events) >= n
	})
	return events
}

type harness struct {
	t       testing.TB
	mock    *mockprovider.Server
	limiter *sluice.Limiter
	store   sluice.Store
	rec     *recorder
	url     string
	mockURL string
	gw      *gateway.Gateway
	srv     *fasthttp.Server
}

var testModels = []gateway.Model{
	{Name: "mock-small", Provider: "mock", Price: sluice.Price{Input: 150_000, Output: 600_000}, MaxOutputTokens: 4096, ContextWindow: 128_000, Aliases: []string{"small"}},
	{Name: "mock-large", Provider: "mock", Price: sluice.Price{Input: 3_000_000, CachedInput: 300_000, Output: 15_000_000}, MaxOutputTokens: 8192, ContextWindow: 200_000},
}

// newHarness starts the mock provider and a gateway in front of it with
// rules, on loopback ports.
func newHarness(t *testing.T, rules []sluice.Rule, tweak ...func(*gateway.Options)) *harness {
	t.Helper()
	return startHarness(t, setup{rules: rules, tweak: tweak})
}

// setup is what a harness may vary: the rules, the mock's options, the
// store (nil: a memstore) and the gateway's options.
type setup struct {
	rules []sluice.Rule
	mock  mockprovider.Options
	store sluice.Store
	tweak []func(*gateway.Options)
	// limiter, if set, edits the limiter's options.
	limiter func(*sluice.Options)
	// clock, if set, is the gateway's and the limiter's clock: the test's
	// waits for either take no real time, and it reads what they waited.
	clock *clocktest.Clock
}

// startHarness starts the mock provider and a gateway as s says.
func startHarness(t testing.TB, s setup) *harness {
	t.Helper()
	h := &harness{t: t, mock: mockprovider.New(s.mock), rec: &recorder{}}
	upstream := httptest.NewServer(h.mock)
	t.Cleanup(upstream.Close)
	h.mockURL = upstream.URL
	h.store = s.store
	if h.store == nil {
		h.store = memstore.New(memstore.Options{})
	}
	// Rules and models are cloned: tests running in parallel share the
	// package's rule and model values.
	lopts := sluice.Options{Store: h.store, Rules: slices.Clone(s.rules)}
	if s.clock != nil {
		lopts.Clock = s.clock
	}
	if s.limiter != nil {
		s.limiter(&lopts)
	}
	l, err := sluice.New(lopts)
	if err != nil {
		t.Fatal(err)
	}
	h.limiter = l
	opts := gateway.Options{
		Limiter: l,
		Keys: fakeKeys{testKey: {KeyID: "k1", Org: "o1", Workspace: "w1", User: "u1"},
			"sk-sluice-other": {KeyID: "k2", Org: "o1", Workspace: "w2", User: "u2", AllowedModels: []string{"mock-small"}}},
		Usage:     h.rec,
		Observer:  h.rec.observe,
		Models:    slices.Clone(testModels),
		Providers: []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: upstream.URL}},
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
	}
	if s.clock != nil {
		opts.Clock = s.clock
	}
	for _, f := range s.tweak {
		f(&opts)
	}
	g, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.gw = g
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server()
	h.srv = srv
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { shutdown(srv) })
	h.url = "http://" + ln.Addr().String()
	return h
}

// shutdown shuts srv down once the test's clients have let their idle
// connections go: Shutdown checks for open connections only every 100 ms,
// and most tests would spend that time waiting for a keep-alive connection
// the client no longer needs.
func shutdown(srv *fasthttp.Server) {
	http.DefaultClient.CloseIdleConnections()
	for end := time.Now().Add(100 * time.Millisecond); srv.GetOpenConnectionsCount() > 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	_ = srv.Shutdown()
}

// used returns what rule has counted for the harness's key.
func (h *harness) used(rule string) int64 {
	h.t.Helper()
	return h.effective(sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1"}, rule).Used
}

// usedBy returns what rule has counted for id.
func (h *harness) usedBy(id sluice.Identity, rule string) int64 {
	h.t.Helper()
	return h.effective(id, rule).Used
}

// effective returns rule's effective limit for id and what it counted.
func (h *harness) effective(id sluice.Identity, rule string) sluice.Headroom {
	h.t.Helper()
	eff, err := h.limiter.Effective(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range eff {
		if e.Rule == rule {
			return e
		}
	}
	h.t.Fatalf("no rule %q for %+v", rule, id)
	return sluice.Headroom{}
}

// mockCalls is how many requests the mock provider received.
func (h *harness) mockCalls() int64 {
	n := int64(0)
	for _, c := range h.mock.Stats().Requests {
		n += c
	}
	return n
}

// reply is one raw answer of the gateway.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// post sends body to path with the harness's key, unless headers set
// Authorization or x-api-key themselves (an empty value sends nothing).
func (h *harness) post(path, body string, headers map[string]string) reply {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	_, auth := headers["Authorization"]
	_, apiKey := headers["x-api-key"]
	if !auth && !apiKey {
		req.Header.Set("Authorization", "Bearer "+testKey)
	}
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("reading the answer of %s: %v", path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// limitObject is the limit object of a refusal body.
type limitObject struct {
	Rule         string `json:"rule"`
	Subject      string `json:"subject"`
	Metric       string `json:"metric"`
	Limit        int64  `json:"limit"`
	Used         int64  `json:"used"`
	Remaining    int64  `json:"remaining"`
	Requested    int64  `json:"requested"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ResetAt      string `json:"reset_at"`
	Source       string `json:"source"`
}

// errorReply is an error body in either shape: OpenAI's
// {"error":{"message","type","code","param"}} or Anthropic's
// {"type":"error","error":{"type","message"}}, each with its limit object.
type errorReply struct {
	Type  string `json:"type"`
	Error struct {
		Message string       `json:"message"`
		Type    string       `json:"type"`
		Code    *string      `json:"code"`
		Param   *string      `json:"param"`
		Limit   *limitObject `json:"limit"`
	} `json:"error"`
}

// openaiError decodes r as an OpenAI error body, failing the test when it is
// not one (every member present, param and code null or strings).
func openaiError(t *testing.T, r reply) errorReply {
	t.Helper()
	var raw struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(r.body, &raw); err != nil || raw.Error == nil {
		t.Fatalf("status %d: body %s is not an OpenAI error (%v)", r.status, r.body, err)
	}
	for _, k := range []string{"message", "type", "code", "param"} {
		if _, ok := raw.Error[k]; !ok {
			t.Fatalf("OpenAI error body %s lacks %q", r.body, k)
		}
	}
	var e errorReply
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	if e.Type != "" || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("OpenAI error body %s: want a message and a type, no top-level type", r.body)
	}
	return e
}

// anthropicError decodes r as an Anthropic error body, failing the test
// when it is not one.
func anthropicError(t *testing.T, r reply) errorReply {
	t.Helper()
	var e errorReply
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("status %d: body %s is not JSON: %v", r.status, r.body, err)
	}
	if e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("body %s is not an Anthropic error", r.body)
	}
	if e.Error.Param != nil || e.Error.Code != nil {
		t.Fatalf("Anthropic error body %s carries OpenAI members", r.body)
	}
	return e
}

// eventually polls cond until it holds or five seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// mockOptions is a mock that spaces its streamed chunks by interval.
func mockOptions(interval time.Duration) mockprovider.Options {
	return mockprovider.Options{ChunkInterval: interval}
}

// chatParams is a chat request for mock-small with prompt and an output
// cap of maxTokens.
func chatParams(prompt string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "mock-small", MaxTokens: openai.Int(maxTokens),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
}
