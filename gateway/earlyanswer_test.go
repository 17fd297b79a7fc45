package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// TestGateway_EarlyAnswersAreLoggedAndCounted: the answers made before a
// request becomes a call (fasthttp's 413, 408 and 400, a route that does
// not exist, a method a route does not take, two framings, a session or
// models route refused) each reach the Observer once, and so the request
// log and sluice_requests_total, under the request's X-Request-Id.
func TestGateway_EarlyAnswersAreLoggedAndCounted(t *testing.T) {
	t.Parallel()
	head := func(method, path, extra string) string {
		return method + " " + path + " HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + testKey + "\r\n" + extra
	}
	chat := `{"model":"mock-small","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name    string
		request string
		status  int
		// route is "other" where the path was not read.
		route   string
		outcome string
	}{
		{name: "BodyTooLarge", request: head("POST", "/v1/chat/completions", "Content-Length: 4096\r\n\r\n") + strings.Repeat("x", 4096),
			status: 413, route: "chat", outcome: "too_large"},
		{name: "BodyTooLargeMessages", request: head("POST", "/v1/messages", "Content-Length: 4096\r\n\r\n") + strings.Repeat("x", 4096),
			status: 413, route: "messages", outcome: "too_large"},
		{name: "HeaderTimeout", request: head("POST", "/v1/chat/completions", "Content-Length: 5\r\n"),
			status: 408, route: "other", outcome: "bad_request"},
		{name: "Malformed", request: "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nbroken header\r\n\r\n",
			status: 400, route: "other", outcome: "bad_request"},
		{name: "NotFound", request: head("POST", "/v1/nothing", fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(chat), chat)),
			status: 404, route: "other", outcome: "bad_request"},
		{name: "MethodNotAllowed", request: head("GET", "/v1/chat/completions", "\r\n"),
			status: 405, route: "chat", outcome: "bad_request"},
		{name: "LengthAndChunked", request: head("POST", "/v1/chat/completions", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
			status: 400, route: "chat", outcome: "bad_request"},
		{name: "SessionsOff", request: head("POST", "/v1/sessions", "Content-Length: 2\r\n\r\n{}"),
			status: 404, route: "sessions", outcome: "bad_request"},
		{name: "ModelsBadKey", request: "GET /v1/models HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer sk-sluice-wrong\r\n\r\n",
			status: 401, route: "models", outcome: "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logged syncbuf.Buffer
			log := slog.New(slog.NewJSONHandler(&logged, nil))
			metrics := admin.NewMetrics(admin.MetricsOptions{})
			rec := &recorder{}
			h := newHarness(t, nil, func(o *gateway.Options) {
				o.MaxBodyBytes, o.HeaderTimeout = 1024, 300*time.Millisecond
				o.Observer = func(e gateway.Event) {
					rec.observe(e)
					metrics.Observe(e)
					admin.LogRequest(log, e)
				}
			})
			conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(conn, tt.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			id := resp.Header.Get("X-Request-Id")
			if resp.StatusCode != tt.status || id == "" {
				t.Fatalf("status %d, X-Request-Id %q; want %d and an ID", resp.StatusCode, id, tt.status)
			}
			ev := rec.waitEvents(t, 1)
			if len(ev) != 1 || ev[0].Status != tt.status || ev[0].Outcome != tt.outcome || ev[0].Route != tt.route || ev[0].RequestID != id {
				t.Fatalf("events %+v, want one: status %d, outcome %s, route %s, request ID %s", ev, tt.status, tt.outcome, tt.route, id)
			}
			eventually(t, "the request's log line", func() bool {
				return strings.Contains(logged.String(), `"request_id":"`+id+`"`)
			})
			if line := logged.String(); !strings.Contains(line, fmt.Sprintf(`"outcome":"%s"`, tt.outcome)) || !strings.Contains(line, fmt.Sprintf(`"status":%d`, tt.status)) {
				t.Errorf("log line %s", line)
			}
			scrape := httptest.NewRecorder()
			metrics.Handler().ServeHTTP(scrape, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			want := fmt.Sprintf(`sluice_requests_total{class="terminal",model="other",outcome="%s",route="%s"} 1`, tt.outcome, tt.route)
			if !bytes.Contains(scrape.Body.Bytes(), []byte(want)) {
				t.Errorf("metrics lack %s:\n%s", want, grep(scrape.Body.String(), "sluice_requests_total"))
			}
		})
	}
}

// grep returns the lines of s that contain what.
func grep(s, what string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, what) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestGateway_SessionRouteAnswersAreObserved: the session routes' answers
// that are not a session opened or closed (a refusal, a session read) reach
// the Observer too, charged to the key that asked.
func TestGateway_SessionRouteAnswersAreObserved(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, nil)
	auth := map[string]string{"Authorization": "Bearer " + testKey}
	if r := h.get("/v1/sessions/sess_missing", auth); r.status != 404 {
		t.Fatalf("unknown session: %d %s", r.status, r.body)
	}
	if r := h.get("/v1/models", auth); r.status != 200 {
		t.Fatalf("models: %d %s", r.status, r.body)
	}
	ev := h.rec.waitEvents(t, 2)
	if e := ev[0]; e.Route != "sessions" || e.Status != 404 || e.Outcome != "bad_request" || e.KeyID != "k1" {
		t.Errorf("unknown session's event %+v", e)
	}
	if e := ev[1]; e.Route != "models" || e.Status != 200 || e.Outcome != "admitted" || e.KeyID != "k1" {
		t.Errorf("models' event %+v", e)
	}
}
