package retry_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/retry"
)

// recordingServer answers with replies in turn (repeating the last) and
// records each request's method and body.
type recordingServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
}

func newRecordingServer(t *testing.T, replies ...reply) *recordingServer {
	t.Helper()
	s := &recordingServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(body))
		rep := replies[min(len(s.bodies), len(replies))-1]
		s.mu.Unlock()
		for k, vs := range rep.header {
			w.Header()[k] = vs
		}
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *recordingServer) Bodies() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// client retries through a Transport whose waits are predictable: backoff
// at its cap, hints exact.
func client(clock *fakeClock) *http.Client {
	p := retry.Policy{Clock: clock, Jitter: fullJitter, HintSlack: -1}
	return &http.Client{Transport: &retry.Transport{Policy: p}}
}

const chatRequest = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`

func TestTransport_ReplaysBodyWithGetBody(t *testing.T) {
	srv := newRecordingServer(t,
		reply{503, nil, "unavailable"},
		reply{429, header("retry-after-ms", "300"), rateLimitBody},
		reply{200, nil, `{"id":"chatcmpl-1"}`})
	clock := newFakeClock()
	resp, err := client(clock).Post(srv.URL, "application/json", strings.NewReader(chatRequest))
	if err != nil {
		t.Fatalf("Post: %v", err)
	}
	if resp.StatusCode != 200 || readBody(t, resp) != `{"id":"chatcmpl-1"}` {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	bodies := srv.Bodies()
	if len(bodies) != 3 {
		t.Fatalf("%d requests, want 3", len(bodies))
	}
	for i, body := range bodies {
		if body != chatRequest {
			t.Errorf("attempt %d sent body %q, want %q", i+1, body, chatRequest)
		}
	}
	if waits := clock.Waits(); len(waits) != 2 || waits[0] != 250*time.Millisecond || waits[1] != 300*time.Millisecond {
		t.Errorf("waits = %v, want the first 250ms backoff then the 300ms hint", waits)
	}
}

func TestTransport_BodylessRequestIsRetried(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			srv := newRecordingServer(t, reply{504, nil, ""}, reply{200, nil, "ok"})
			req, err := http.NewRequestWithContext(t.Context(), method, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client(newFakeClock()).Do(req)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.StatusCode != 200 || readBody(t, resp) != "ok" || len(srv.Bodies()) != 2 {
				t.Fatalf("status %d after %d requests, want 200 after 2", resp.StatusCode, len(srv.Bodies()))
			}
		})
	}
}

func TestTransport_BodyWithoutGetBodyIsSentOnce(t *testing.T) {
	srv := newRecordingServer(t, reply{503, nil, "unavailable"}, reply{200, nil, "ok"})
	// A body http.NewRequest cannot copy: no GetBody, so no replay.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, io.NopCloser(strings.NewReader(chatRequest)))
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	resp, err := client(clock).Do(req)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if resp.StatusCode != 503 || readBody(t, resp) != "unavailable" {
		t.Fatalf("status %d, want the 503 passed on", resp.StatusCode)
	}
	if bodies := srv.Bodies(); len(bodies) != 1 || bodies[0] != chatRequest || len(clock.Waits()) != 0 {
		t.Fatalf("requests %q, waits %v; want one request and no wait", bodies, clock.Waits())
	}
}

func TestTransport_NeverRetriesTerminal(t *testing.T) {
	srv := newRecordingServer(t, reply{429, header("x-should-retry", "false"), `{"error":{"type":"budget_exceeded"}}`}, reply{200, nil, "ok"})
	resp, err := client(newFakeClock()).Post(srv.URL, "application/json", strings.NewReader(chatRequest))
	if err != nil {
		t.Fatalf("Post: %v", err)
	}
	if resp.StatusCode != 429 || readBody(t, resp) != `{"error":{"type":"budget_exceeded"}}` {
		t.Fatalf("status %d, want the budget refusal", resp.StatusCode)
	}
	if n := len(srv.Bodies()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func TestTransport_GetBodyFailureIsTerminal(t *testing.T) {
	srv := newRecordingServer(t, reply{503, nil, ""}, reply{200, nil, "ok"})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(chatRequest))
	if err != nil {
		t.Fatal(err)
	}
	gone := errors.New("upload buffer released")
	req.GetBody = func() (io.ReadCloser, error) { return nil, gone }
	clock := newFakeClock()
	resp, err := client(clock).Do(req)
	if resp != nil || !errors.Is(err, gone) {
		t.Fatalf("Do = %v, %v; want the GetBody error", resp, err)
	}
	if n := len(srv.Bodies()); n != 1 || len(clock.Waits()) != 1 {
		t.Fatalf("%d requests, waits %v; want 1 request and 1 wait before the failed replay", n, clock.Waits())
	}
}

func TestTransport_ZeroValueUsesDefaultTransport(t *testing.T) {
	srv := newRecordingServer(t, reply{200, nil, "ok"})
	c := &http.Client{Transport: &retry.Transport{}}
	resp, err := c.Get(srv.URL)
	if err != nil || resp.StatusCode != 200 || readBody(t, resp) != "ok" {
		t.Fatalf("Get = %v, %v", resp, err)
	}
	c.CloseIdleConnections()
}
