package sdkcall

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/openai"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/sluicehq/sluice/store/memstore"
)

var who = sluice.Identity{Workspace: "w1"}

var outputBudget = sluice.Rule{Name: "output", Kind: sluice.KindBudget, Subject: "workspace",
	Metric: sluice.MetricOutputTokens, Limit: 1_000_000, Period: sluice.PeriodDay}

var chat = &API{
	Name:  "chat",
	Parse: openai.ParseChat,
	Edit: func(body []byte, b llm.Bound, outputCap int64) ([]byte, bool) {
		injected := b.Stream && !b.IncludeUsage
		return openai.EditChat(body, b, openai.ChatEdit{OutputCap: outputCap, IncludeUsage: injected}), injected
	},
	Usage:          openai.ChatUsage,
	Stream:         func(injected bool) Follower { return &openai.ChatStream{StripUsage: injected} },
	RefusalBody:    func(r *sluicehttp.Refusal) []byte { return []byte(r.Code) },
	BadRequestBody: func(param, message string) []byte { return []byte(param + ": " + message) },
}

func newMiddleware(t *testing.T, opts Options) (*sluice.Limiter, func(*http.Request, Next) (*http.Response, error)) {
	t.Helper()
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: []sluice.Rule{outputBudget}})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Identity == nil {
		opts.Identity = func(*http.Request) sluice.Identity { return who }
	}
	return l, Middleware(l, opts, func(*http.Request) *API { return chat })
}

func used(t *testing.T, l *sluice.Limiter) int64 {
	t.Helper()
	all, err := l.Effective(context.Background(), who)
	if err != nil || len(all) != 1 {
		t.Fatalf("effective %+v %v", all, err)
	}
	return all[0].Used
}

func post(ctx context.Context, body string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/v1/chat/completions", strings.NewReader(body))
	return req
}

func chunk(content string) string {
	return "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + content + "\"}}]}\n\n"
}

func TestMiddleware_BodyEditedAndReplayable(t *testing.T) {
	l, mw := newMiddleware(t, Options{MaxOutputTokens: func(string) int64 { return 64 }})
	var sent, replayed []byte
	_, err := mw(post(context.Background(), `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), func(r *http.Request) (*http.Response, error) {
		sent, _ = io.ReadAll(r.Body)
		if r.ContentLength != int64(len(sent)) {
			t.Errorf("ContentLength %d, body %d bytes", r.ContentLength, len(sent))
		}
		body, _ := r.GetBody()
		replayed, _ = io.ReadAll(body)
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"usage":{"prompt_tokens":3,"completion_tokens":5}}`))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"max_completion_tokens":64,"model":"m","messages":[{"role":"user","content":"hi"}]}`; string(sent) != want || !bytes.Equal(sent, replayed) {
		t.Fatalf("sent %s, replayed %s; want %s", sent, replayed, want)
	}
	if got := used(t, l); got != 5 {
		t.Fatalf("output used %d, want 5", got)
	}
}

func TestMiddleware_NotSent(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		req     *http.Request
		status  int // of the synthesized answer; 0 for an error
		body    string
		wantErr error
	}{
		{name: "malformed", req: post(context.Background(), `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":1000}`),
			status: 400, body: "n: Invalid 'n': expected a value between 1 and 128."},
		{name: "never fits", req: post(context.Background(), `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2000000}`),
			status: 413, body: "request_too_large"},
		{name: "canceled", req: post(canceled, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, mw := newMiddleware(t, Options{})
			resp, err := mw(tt.req, func(*http.Request) (*http.Response, error) {
				t.Fatal("the request was sent")
				return nil, nil
			})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || string(body) != tt.body || resp.Request != tt.req {
				t.Fatalf("answer %d %q, want %d %q", resp.StatusCode, body, tt.status, tt.body)
			}
		})
	}
}

// TestMiddleware_CloseRacesRead closes the stream while a Read waits on the provider: the
// reservation is settled once, for the output read so far.
func TestMiddleware_CloseRacesRead(t *testing.T) {
	l, mw := newMiddleware(t, Options{})
	pr, pw := io.Pipe()
	resp, err := mw(post(context.Background(), `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":100}`), func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = io.WriteString(pw, chunk("one")+chunk("two"))
	}()
	buf := make([]byte, 4096)
	for _, want := range []string{chunk("one"), chunk("two")} {
		n, err := resp.Body.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q %v, want %q", buf[:n], err, want)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var readErr error
	go func() {
		defer wg.Done()
		_, readErr = resp.Body.Read(buf) // blocks: the provider sends nothing more
	}()
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if readErr == nil {
		t.Fatal("a Read after Close succeeded")
	}
	_ = resp.Body.Close()
	if got := used(t, l); got != 2 {
		t.Fatalf("output used %d, want the 2 chunks read", got)
	}
}

// TestMiddleware_InjectedUsageIsHidden feeds a stream that reports usage the client did not
// ask for: the usage chunk is dropped and settles the call.
func TestMiddleware_InjectedUsageIsHidden(t *testing.T) {
	l, mw := newMiddleware(t, Options{})
	var sent []byte
	resp, err := mw(post(context.Background(), `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":100}`), func(r *http.Request) (*http.Response, error) {
		sent, _ = io.ReadAll(r.Body)
		stream := chunk("a") + chunk("b") + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":9}}\n\n" + "data: [DONE]\n\n"
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}},
			Body: io.NopCloser(strings.NewReader(stream))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(sent, []byte(`"stream_options":{"include_usage":true}`)) {
		t.Fatalf("sent %s without include_usage", sent)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := chunk("a") + chunk("b") + "data: [DONE]\n\n"; string(got) != want {
		t.Fatalf("the client read %q, want %q", got, want)
	}
	if got := used(t, l); got != 9 {
		t.Fatalf("output used %d, want the reported 9", got)
	}
}
