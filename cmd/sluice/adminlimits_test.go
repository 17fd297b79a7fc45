package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startAdminWith serves a handler that answers 200 on a free loopback port
// within lim, and returns its address.
func startAdminWith(t *testing.T, lim adminLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	srv := serveAdmin(ln, h, lim, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// get sends one keep-alive GET on conn and reads its answer.
func get(t *testing.T, conn net.Conn, r *bufio.Reader) {
	t.Helper()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// An admin connection kept alive after a request is closed once idle for
// the idle timeout: 19,977 of them once held every descriptor.
func TestServeAdmin_ClosesIdleKeepAliveConnections(t *testing.T) {
	lim := defaultAdminLimits
	lim.idle = 100 * time.Millisecond
	conn, err := net.Dial("tcp", startAdminWith(t, lim))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	get(t, conn, r)
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection read %v, want it closed (EOF)", err)
	}
	if held := time.Since(start); held > 2*time.Second {
		t.Fatalf("idle connection held %v, idle timeout %v", held, lim.idle)
	}
}

// Past maxConns, a connection waits to be served until one closes.
func TestServeAdmin_CapsConnections(t *testing.T) {
	lim := defaultAdminLimits
	lim.maxConns = 2
	addr := startAdminWith(t, lim)
	var held []net.Conn
	for range lim.maxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		get(t, c, bufio.NewReader(c)) // accepted, served, and kept alive
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", addr) // the kernel's backlog takes it
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	r := bufio.NewReader(extra)
	if _, err := io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = extra.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.Peek(1); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a connection past the cap was served (%v)", err)
	}
	held[0].Close()
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("not served once a connection closed: %v", err)
	}
	resp.Body.Close()
}
