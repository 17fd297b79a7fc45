//go:build linux

package gateway_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// TestGateway_ClientLeavesDuringUpstreamCall: a client that closes its
// connection while the provider works on a call that is not streamed has
// the upstream call cancelled at once (the provider would answer after 5
// s), and is charged the reservation, since what the provider produced is
// unknown.
func TestGateway_ClientLeavesDuringUpstreamCall(t *testing.T) {
	t.Parallel()
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}})
	const body = `{"model":"mock-small","max_tokens":50,"messages":[{"role":"user","content":"take your time [mock delay=5000]"}]}`
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", testKey, len(body), body)
	eventually(t, "the call to reach the provider", func() bool { return h.mockCalls() == 1 })
	time.Sleep(100 * time.Millisecond)
	left := time.Now()
	conn.Close()
	eventually(t, "the provider to see the call cancelled", func() bool { return h.mock.Stats().CallsCancelled == 1 })
	if took := time.Since(left); took > time.Second {
		t.Errorf("the upstream call was cancelled %v after the client left", took)
	}
	rec := h.rec.waitUsage(t, 1)[0]
	if rec.OutputTokens != 50 || rec.InputTokens <= 0 {
		t.Errorf("ledger %+v, want the reservation: the input estimate and the 50-token cap", rec)
	}
	if got := h.used("daily_tokens"); got != rec.InputTokens+50 {
		t.Errorf("budget charged %d, want the reservation %d", got, rec.InputTokens+50)
	}
	if ev := h.rec.waitEvents(t, 1); ev[0].Outcome != "client_gone" || ev[0].Status != 499 {
		t.Errorf("event %+v, want client_gone with 499", ev[0])
	}
	// The connection pool is usable afterwards.
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("next call: %d %s", r.status, r.body)
	}
}

// TestGateway_ClientLeavesSilentStream: a client that leaves a stream while
// the provider is silent (5 s between chunks) has the upstream stream
// cancelled at once, not when the next chunk would have failed to reach
// it, and is charged what was streamed.
func TestGateway_ClientLeavesSilentStream(t *testing.T) {
	t.Parallel()
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, mock: mockOptions(5 * time.Second)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := openChatStream(ctx, h, "one word, then think", 2000)
	if !s.next() {
		t.Fatalf("no first chunk: %v", s.err())
	}
	time.Sleep(50 * time.Millisecond)
	left := time.Now()
	cancel()
	s.close()
	eventually(t, "the provider to see the stream cancelled", func() bool { return h.mock.Stats().StreamsCancelled == 1 })
	if took := time.Since(left); took > time.Second {
		t.Errorf("the upstream stream was cancelled %v after the client left", took)
	}
	rec := h.rec.waitUsage(t, 1)[0]
	if rec.OutputTokens < 1 || rec.OutputTokens > 2 || rec.InputTokens <= 0 {
		t.Errorf("ledger %+v, want the input estimate and the one token streamed", rec)
	}
	if ev := h.rec.waitEvents(t, 1); ev[0].Outcome != "client_gone" {
		t.Errorf("event %+v, want client_gone", ev[0])
	}
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("next call: %d %s", r.status, r.body)
	}
}

// TestGateway_ClientLeavesWhileHeldByPacing: a call held for its provider's
// rate limit whose client leaves is let go at once, never sent, and not
// charged.
func TestGateway_ClientLeavesWhileHeldByPacing(t *testing.T) {
	t.Parallel()
	budget := sluice.Rule{Name: "daily_requests", Kind: sluice.KindBudget, Subject: "workspace", Limit: 100, Period: sluice.PeriodDay}
	h := startHarness(t, setup{rules: []sluice.Rule{budget}, mock: mockprovider.Options{RateLimitRequests: 1, RateLimitWindow: 3 * time.Second},
		tweak: []func(*gateway.Options){paced}})
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", testKey, len(smallChat), smallChat)
	time.Sleep(150 * time.Millisecond)
	left := time.Now()
	conn.Close()
	ev := h.rec.waitEvents(t, 2)
	if took := time.Since(left); took > time.Second || ev[1].Outcome != "client_gone" {
		t.Fatalf("held call after its client left: %+v after %v", ev[1], took)
	}
	if n := h.mock.Stats().Requests[mockprovider.RouteChat]; n != 1 {
		t.Errorf("the provider was called %d times, want 1", n)
	}
	if got := h.used("daily_requests"); got != 1 {
		t.Errorf("budget charged %d requests, want 1", got)
	}
}
