package gateway_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"math/big"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// serveTLS serves the harness's gateway on a second, TLS listener with a
// self-signed certificate (the SDK's realtime client always dials wss),
// and returns its https base URL.
func serveTLS(t *testing.T, h *harness) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := h.gw.Server()
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	go func() { _ = srv.Serve(tln) }()
	t.Cleanup(func() { shutdown(srv) })
	return "https://" + ln.Addr().String()
}

// sdkLine is one thing realtime.mjs saw.
type sdkLine struct {
	Event        string `json:"event"`
	Code         any    `json:"code"` // an error's code, or a close's
	Reason       string `json:"reason"`
	Terminal     bool   `json:"terminal"`
	Reconnect    bool   `json:"reconnect"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Rule         string `json:"rule"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
}

// runRealtimeSDK runs one scenario of realtime.mjs against base, calling
// seen with each line as it comes; it returns them all.
func runRealtimeSDK(t *testing.T, dir, base, scenario, session string, seen func(sdkLine)) []sdkLine {
	t.Helper()
	cmd := exec.Command("node", "realtime.mjs", base, testKey, "mock-small", scenario, session)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []sdkLine
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var l sdkLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("realtime.mjs said %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
		if seen != nil {
			seen(l)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("realtime.mjs %s: %v\n%+v\n%s", scenario, err, lines, stderr.String())
	}
	return lines
}

// only returns the lines of event.
func only(lines []sdkLine, event string) []sdkLine {
	var out []sdkLine
	for _, l := range lines {
		if l.Event == event {
			out = append(out, l)
		}
	}
	return out
}

// lastClose is the close the SDK saw, or fails the test.
func lastClose(t *testing.T, lines []sdkLine) sdkLine {
	t.Helper()
	closes := only(lines, "close")
	if len(closes) != 1 {
		t.Fatalf("lines %+v: want one close", lines)
	}
	return closes[0]
}

// The official openai SDK's OpenAIRealtimeWS through Sluice: a session
// read to response.done and settled; a throttled response.create retried
// after its hint; a token ceiling and a 3 s wall clock each closing 1011
// "quota exceeded", which the seed's close handler takes as terminal; a
// provider's drop, which it reconnects after.
func TestGateway_NPMRealtimeClient(t *testing.T) {
	t.Parallel()
	dir := npmClients(t)
	t.Run("session", func(t *testing.T) {
		h := newHarness(t, liveRules)
		lines := runRealtimeSDK(t, dir, serveTLS(t, h), "basic", "", nil)
		done := only(lines, "response.done")
		if len(done) != 1 || len(only(lines, "session.updated")) != 1 || lastClose(t, lines).Code != 1000.0 {
			t.Fatalf("lines %+v", lines)
		}
		r := h.rec.waitUsage(t, 1)[0]
		if r.InputTokens != done[0].InputTokens || r.OutputTokens != done[0].OutputTokens || done[0].OutputTokens != 16 {
			t.Fatalf("record %+v, the SDK read %+v", r, done[0])
		}
	})
	t.Run("throttled, retried after the hint", func(t *testing.T) {
		// The connection and the first response take the bucket: the
		// second response is refused, then admitted half a second on.
		h := newHarness(t, []sluice.Rule{{Name: "two_a_second", Kind: sluice.KindRate, Subject: "key", Limit: 2, Window: time.Second}})
		lines := runRealtimeSDK(t, dir, serveTLS(t, h), "throttled", "", nil)
		errs := only(lines, "error")
		if len(errs) != 1 || errs[0].Code != "rate_limit_exceeded" || errs[0].RetryAfterMS <= 0 || errs[0].Rule != "two_a_second" {
			t.Fatalf("lines %+v: want one throttle with its hint", lines)
		}
		if len(only(lines, "response.done")) != 2 || lastClose(t, lines).Code != 1000.0 {
			t.Fatalf("lines %+v: want the retry answered and the connection kept", lines)
		}
	})
	t.Run("token ceiling", func(t *testing.T) {
		h := sessionHarness(t, nil)
		_, s := h.sessionCall("POST", "/v1/sessions", `{"max_tokens":300}`, nil)
		lines := runRealtimeSDK(t, dir, serveTLS(t, h), "ceiling", s.ID, nil)
		c := lastClose(t, lines)
		if errs := only(lines, "error"); len(errs) != 1 || errs[0].Code != "session_ceiling_reached" {
			t.Fatalf("lines %+v: want the ceiling's error event", lines)
		}
		if c.Code != 1011.0 || !strings.Contains(c.Reason, "quota exceeded") || !c.Terminal || c.Reconnect {
			t.Fatalf("close %+v: want 1011 quota exceeded, terminal to the seed's handler", c)
		}
	})
	t.Run("3 s wall clock", func(t *testing.T) {
		clock := clocktest.New(time.Now())
		h := sessionHarness(t, nil, func(o *gateway.Options) { o.Clock = clock })
		_, s := h.sessionCall("POST", "/v1/sessions", `{"max_duration_seconds":3}`, nil)
		var reached time.Time
		lines := runRealtimeSDK(t, dir, serveTLS(t, h), "wait", s.ID, func(l sdkLine) {
			if l.Event == "open" {
				reached = time.Now()
				clock.Advance(3 * time.Second)
			}
		})
		c := lastClose(t, lines)
		if c.Code != 1011.0 || !c.Terminal || !strings.Contains(c.Reason, "wall-clock") {
			t.Fatalf("close %+v: want the wall clock's quota close", c)
		}
		if took := time.Since(reached); took > time.Second {
			t.Fatalf("closed %s after the wall clock passed", took)
		}
	})
	t.Run("provider drop", func(t *testing.T) {
		h := newHarness(t, liveRules)
		c := lastClose(t, runRealtimeSDK(t, dir, serveTLS(t, h), "drop", "", nil))
		if c.Code != 1011.0 || c.Terminal || !c.Reconnect {
			t.Fatalf("close %+v: want 1011 without quota words, reconnected after", c)
		}
	})
}
