package gateway_test

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/llm/bpe"
)

// TestGateway_ContextWindowRefusesOnlyPromptsCertainlyTooLong: mock-small
// with a 1,000-token window counted with o200k_base. A prompt of about
// 1,500 tokens is refused 400 context_length_exceeded in the API's shape,
// never forwarded nor charged; one of about 800 tokens whose bytes / 3
// estimate (1,200) is over the window is served.
func TestGateway_ContextWindowRefusesOnlyPromptsCertainlyTooLong(t *testing.T) {
	t.Parallel()
	enc := o200k(t)
	budget := sluice.Rule{Name: "daily_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{budget}, withWindow(1000, enc))
	long := strings.Repeat("hello ", 1500)
	if n := enc.Count([]byte(long)); n < 1400 {
		t.Fatalf("the long prompt has %d tokens", n)
	}
	fits := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 80)
	if n := enc.Count([]byte(fits)); n > 900 || int64(len(fits))/3 <= 1000 {
		t.Fatalf("the prompt that fits has %d tokens in %d bytes", n, len(fits))
	}
	for i, api := range []struct{ name, path, body string }{
		{"OpenAI", "/v1/chat/completions", `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"%s"}]}`},
		{"Anthropic", "/v1/messages", `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"%s"}]}]}`},
	} {
		t.Run(api.name, func(t *testing.T) {
			calls, used := h.mockCalls(), h.used("daily_tokens")
			r := h.post(api.path, strings.Replace(api.body, "%s", long, 1), nil)
			var e errorReply
			if api.name == "OpenAI" {
				e = openaiError(t, r)
				if e.Error.Code == nil || *e.Error.Code != "context_length_exceeded" || e.Error.Type != "invalid_request_error" {
					t.Errorf("error %s", r.body)
				}
			} else {
				e = anthropicError(t, r)
				if e.Error.Type != "invalid_request_error" {
					t.Errorf("error %s", r.body)
				}
			}
			if r.status != 400 || !strings.Contains(e.Error.Message, "maximum context length is 1000 tokens") {
				t.Fatalf("long prompt: %d %s", r.status, r.body)
			}
			if h.mockCalls() != calls {
				t.Error("the long prompt was forwarded")
			}
			if got := h.used("daily_tokens"); got != used {
				t.Errorf("the refusal charged %d tokens", got-used)
			}
			if r := h.post(api.path, strings.Replace(api.body, "%s", fits, 1), nil); r.status != 200 {
				t.Fatalf("a prompt that fits: %d %s", r.status, r.body)
			}
			h.rec.waitUsage(t, i+1) // settled before the next subtest reads the budget
		})
	}
}

// countingTokenizer counts the bytes it is given.
type countingTokenizer struct {
	gateway.Tokenizer
	bytes atomic.Int64
}

func (c *countingTokenizer) Count(text []byte) int {
	c.bytes.Add(int64(len(text)))
	return c.Tokenizer.Count(text)
}

// TestGateway_ContextWindowCountsNoMoreThanItNeeds: a 3 MB prompt against
// a 1,000-token window is refused after counting a chunk or two of it, not
// all of it; a prompt no longer in bytes than the window is not counted.
func TestGateway_ContextWindowCountsNoMoreThanItNeeds(t *testing.T) {
	t.Parallel()
	enc := o200k(t)
	tk := &countingTokenizer{Tokenizer: enc}
	h := newHarness(t, nil, withWindow(1000, tk))
	r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"`+strings.Repeat("hello ", 500_000)+`"}]}`, nil)
	if r.status != 400 || !strings.Contains(string(r.body), "context_length_exceeded") {
		t.Fatalf("3 MB prompt: %d %.300s", r.status, r.body)
	}
	if n := tk.bytes.Load(); n == 0 || n > 64<<10 {
		t.Errorf("counted %d bytes of a 3 MB prompt to refuse it against 1,000 tokens", n)
	}
	tk.bytes.Store(0)
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("small prompt: %d %s", r.status, r.body)
	}
	if n := tk.bytes.Load(); n != 0 {
		t.Errorf("counted %d bytes of a prompt shorter in bytes than the window", n)
	}
}

// TestGateway_ContextWindowCountsOnlyAdmittedCalls: the count runs after
// admission. A prompt longer in bytes than the window from a key whose
// budget is spent is refused by the budget, and not counted; the same
// prompt, admitted, is counted and refused 400 with its admission given
// back.
func TestGateway_ContextWindowCountsOnlyAdmittedCalls(t *testing.T) {
	t.Parallel()
	enc := o200k(t)
	tk := &countingTokenizer{Tokenizer: enc}
	budget := sluice.Rule{Name: "daily_requests", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 2, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{budget}, withWindow(1000, tk))
	long := longChat
	r := h.post("/v1/chat/completions", long, nil)
	if r.status != 400 || !strings.Contains(string(r.body), "context_length_exceeded") {
		t.Fatalf("admitted long prompt: %d %.300s", r.status, r.body)
	}
	if tk.bytes.Load() == 0 {
		t.Error("the admitted long prompt was not counted")
	}
	if got := h.used("daily_requests"); got != 0 {
		t.Errorf("the refusal charged %d requests, want its admission given back", got)
	}
	for i := range 2 { // spend the budget
		if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	h.rec.waitUsage(t, 2)
	tk.bytes.Store(0)
	r = h.post("/v1/chat/completions", long, nil)
	if r.status != 429 || !strings.Contains(string(r.body), "budget_exceeded") {
		t.Fatalf("long prompt on a spent budget: %d %.300s", r.status, r.body)
	}
	if n := tk.bytes.Load(); n != 0 {
		t.Errorf("counted %d bytes of a prompt the budget refused", n)
	}
}

// slowTokenizer counts like its Tokenizer, slowly, and records the most
// counts it ran at once.
type slowTokenizer struct {
	gateway.Tokenizer
	running, most atomic.Int64
}

func (s *slowTokenizer) Count(text []byte) int {
	n := s.running.Add(1)
	defer s.running.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	return s.Tokenizer.Count(text)
}

// TestGateway_ContextWindowCountsTakeTurns: with MaxConcurrentCounts 1,
// long prompts arriving together are counted one at a time, and each is
// still refused.
func TestGateway_ContextWindowCountsTakeTurns(t *testing.T) {
	t.Parallel()
	enc := o200k(t)
	tk := &slowTokenizer{Tokenizer: enc}
	h := newHarness(t, nil, withWindow(1000, tk), func(o *gateway.Options) { o.MaxConcurrentCounts = 1 })
	long := longChat
	var wg sync.WaitGroup
	statuses := make([]int, 4)
	for i := range statuses {
		wg.Go(func() { statuses[i] = h.post("/v1/chat/completions", long, nil).status })
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 400 {
			t.Errorf("long prompt %d: %d, want 400", i, s)
		}
	}
	if most := tk.most.Load(); most != 1 {
		t.Errorf("%d prompts counted at once, want 1", most)
	}
}

// o200k is OpenAI's o200k_base encoding.
func o200k(t *testing.T) gateway.Tokenizer {
	t.Helper()
	enc, err := bpe.Get(bpe.O200k)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// withWindow gives mock-small a context window counted with tk.
func withWindow(window int64, tk gateway.Tokenizer) func(*gateway.Options) {
	return func(o *gateway.Options) {
		o.Models = slices.Clone(o.Models)
		o.Models[0].ContextWindow, o.Models[0].Tokenizer = window, tk
	}
}

// longChat is a chat call of about 1,500 tokens: over a 1,000-token window
// in o200k_base, and in bytes.
var longChat = `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("hello ", 1500) + `"}]}`

// A prompt longer than a model's window goes to its next fallback whose
// window fits, before it is refused; nothing is charged on the first.
func TestGateway_ContextWindowTriesTheFallbackThatFits(t *testing.T) {
	t.Parallel()
	enc := o200k(t)
	budget := sluice.Rule{Name: "daily_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{budget}, withWindow(1000, enc), withFallbacks("mock-small", "mock-large"))
	r := h.post("/v1/chat/completions", longChat, nil)
	if r.status != 200 || r.header.Get("X-Sluice-Model") != "mock-large" {
		t.Fatalf("%d served by %q: want mock-large, whose window fits", r.status, r.header.Get("X-Sluice-Model"))
	}
	if recs := h.rec.waitUsage(t, 1); len(recs) != 1 || recs[0].Model != "mock-large" {
		t.Fatalf("ledger %+v, want one call of mock-large", recs)
	}
}
