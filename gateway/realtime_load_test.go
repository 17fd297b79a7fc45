package gateway_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// A client that never reads is closed once a write to it has waited
// LiveWriteTimeout: the gateway holds one frame on its way, not the
// provider's whole answer, and the response is charged what was sent.
func TestRealtime_ClientThatNeverReadsIsClosed(t *testing.T) {
	h := startHarness(t, setup{rules: liveRules, mock: mockprovider.Options{DefaultMaxTokens: 8192, TokensPerChunk: 64},
		tweak: []func(*gateway.Options){func(o *gateway.Options) { o.LiveWriteTimeout = 200 * time.Millisecond }}})
	c, _, err := h.dialLive(t, "mock-large", nil) // read no more
	if err != nil {
		t.Fatal(err)
	}
	// 8,192 tokens of audio, 50 ms each, about 26 MB of base64: far more
	// than the sockets' buffers hold.
	c.send(`{"type":"session.update","session":{"output_modalities":["audio"]}}`)
	c.send(`{"type":"response.create","response":{"max_output_tokens":8192}}`)
	eventually(t, "the connection closed", func() bool { return h.gw.LiveConnections() == 0 && h.mock.RealtimeStats().Open == 0 })
	r := h.rec.waitUsage(t, 2)[0]
	if r.OutputTokens == 0 || r.OutputTokens >= 8192 || h.mock.RealtimeStats().Completed != 0 {
		t.Fatalf("record %+v: want the response cut, charged the output sent before", r)
	}
}

// A thousand idle live connections are held, each a place in flight, at a
// bounded cost each; all are released when their clients leave.
func TestRealtime_ThousandIdleConnections(t *testing.T) {
	const n = 1000
	h := newHarness(t, nil)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	url := "ws" + strings.TrimPrefix(h.url, "http") + "/v1/realtime?model=mock-small"
	conns := make([]*websocket.Conn, 0, n)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {"Bearer " + testKey}}})
		cancel()
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	eventually(t, "every connection open", func() bool { return h.gw.LiveConnections() == n && h.mock.RealtimeStats().Open == n })
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Client, gateway (both sides) and mock, all in this process.
	per := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	t.Logf("%d connections: %d bytes of heap each, the client's and the mock's included", n, per)
	if per > 256<<10 {
		t.Fatalf("%d bytes of heap per idle connection", per)
	}
	last := &liveClient{t: t, conn: conns[n-1]}
	last.send(`{"type":"response.create","response":{"max_output_tokens":3}}`)
	last.next("response.done")
	for _, c := range conns {
		c.CloseNow()
	}
	eventually(t, "every connection released", func() bool { return h.gw.LiveConnections() == 0 && h.mock.RealtimeStats().Open == 0 })
	if recs := h.rec.waitUsage(t, n+1); len(recs) != n+1 {
		t.Fatalf("%d records, want a connection's each and the response's", len(recs))
	}
}
