package gateway_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	fastws "github.com/fasthttp/websocket"
	"github.com/sluicehq/sluice/gateway"
	"github.com/valyala/fasthttp"
)

// liveFrame is the round trip each live benchmark measures: a client event
// the gateway parses and accounts (it appends instructions), and the mock's
// answer to it (session.updated), both ways through the proxy.
const liveFrame = `{"type":"session.update","session":{"type":"realtime","instructions":"You are a patient interviewer. Ask one question at a time."}}`

// audioResponse is the exchange each audio benchmark measures: a
// response.create answered with 64 audio deltas (50 ms each, 3.2 kB of
// base64) and as many transcript deltas, then response.done: through the
// gateway, the response is admitted and settled too.
const audioResponse = `{"type":"response.create","response":{"max_output_tokens":64,"output_modalities":["audio"]}}`

// benchLive sends liveFrame and reads its answer b.N times over a
// connection to url (a ws:// URL ending in ?model=...); with audio, sends
// audioResponse and reads to its response.done.
func benchLive(b *testing.B, url string, audio ...bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a benchmark that hangs fails
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {"Bearer " + testKey}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err != nil { // session.created
		b.Fatal(err)
	}
	b.ReportAllocs()
	frame := liveFrame
	if len(audio) > 0 {
		frame = audioResponse
	}
	for b.Loop() {
		if err := c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			b.Fatal(err)
		}
		for {
			_, ev, err := c.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if frame == liveFrame || bytes.Contains(ev, []byte(`"type":"response.done"`)) {
				break
			}
		}
	}
}

// BenchmarkRealtime_AudioResponse is one spoken response through the
// gateway: admitted, 128 deltas relayed and counted, settled.
func BenchmarkRealtime_AudioResponse(b *testing.B) {
	h := startHarness(b, setup{rules: benchRules, tweak: []func(*gateway.Options){func(o *gateway.Options) { o.Observer, o.Usage = nil, nil }}})
	benchLive(b, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/realtime?model=mock-small", true)
}

// BenchmarkRealtime_AudioResponseBareRelay is the same response through
// the bare relay.
func BenchmarkRealtime_AudioResponseBareRelay(b *testing.B) {
	benchLive(b, bareRelay(b), true)
}

// BenchmarkRealtime_Frame is one round trip of a client event and its
// answer through a live connection of the gateway (parsed, accounted and
// relayed both ways), to the mock provider over loopback.
func BenchmarkRealtime_Frame(b *testing.B) {
	h := startHarness(b, setup{rules: benchRules, tweak: []func(*gateway.Options){func(o *gateway.Options) { o.Observer, o.Usage = nil, nil }}})
	benchLive(b, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/realtime?model=mock-small")
}

// BenchmarkRealtime_BareRelay is the same round trip through a bare
// relay on the same libraries (fasthttp and its websocket package): it
// upgrades, dials the mock, and copies frames both ways, nothing else.
func BenchmarkRealtime_BareRelay(b *testing.B) {
	benchLive(b, bareRelay(b))
}

// bareRelay starts a mock and a bare relay in front of it, and returns
// the relay's realtime URL.
func bareRelay(b *testing.B) string {
	h := startHarness(b, setup{})
	upstream := "ws" + strings.TrimPrefix(h.mockURL, "http") + "/v1/realtime?model=mock-small"
	up := fastws.FastHTTPUpgrader{CheckOrigin: func(*fasthttp.RequestCtx) bool { return true }}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		_ = up.Upgrade(ctx, func(client *fastws.Conn) {
			server, _, err := fastws.DefaultDialer.Dial(upstream, nil)
			if err != nil {
				return
			}
			defer server.Close()
			go relay(server, client)
			relay(client, server)
		})
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return "ws://" + ln.Addr().String() + "/v1/realtime?model=mock-small"
}

// BenchmarkRealtime_Direct is the round trip to the mock itself, with no
// relay: what both relays add to.
func BenchmarkRealtime_Direct(b *testing.B) {
	h := startHarness(b, setup{})
	benchLive(b, "ws"+strings.TrimPrefix(h.mockURL, "http")+"/v1/realtime?model=mock-small")
}

// relay copies frames from one connection to the other until either ends.
func relay(from, to *fastws.Conn) {
	for {
		typ, frame, err := from.ReadMessage()
		if err != nil {
			to.Close()
			return
		}
		if err := to.WriteMessage(typ, frame); err != nil {
			from.Close()
			return
		}
	}
}
