//go:build linux

package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServe_IdleConnectionFloodUnderALowDescriptorLimit starts serve with
// 128 descriptors, and a connection cap above that (by default the cap is
// the limit less 256, which keeps accept from running out), and floods it
// with idle connections: accept runs out of descriptors, yet serve neither
// exits nor stops serving, closes the connections that send no request
// within header_timeout, and answers a normal call once the flood is gone.
func TestServe_IdleConnectionFloodUnderALowDescriptorLimit(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	data := t.TempDir()
	cfgPath := filepath.Join(data, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte("header_timeout: 2s\nmax_connections: 100000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_LISTEN="+anyPort, "SLUICE_ADMIN_LISTEN="+anyPort,
		"SLUICE_CONFIG="+cfgPath, "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_ENV=", "SLUICE_ADMIN_TOKEN=")
	key := createKey(t, bin, env, "--workspace", "demo", "--user", "me")
	shell := exec.Command("sh", "-c", `ulimit -n 128 && exec "$0" serve`, bin)
	shell.Env = env
	serve := startServe(t, shell)
	listen := serve.listen

	var flood []net.Conn
	for range 400 {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err != nil {
			break // the backlog is full: flood enough
		}
		flood = append(flood, c)
	}
	t.Logf("%d idle connections open", len(flood))
	time.Sleep(time.Second)
	select {
	case err := <-serve.exited:
		t.Fatalf("serve exited under the flood: %v\n%s", err, serve.Stderr())
	default:
	}
	// An idle connection that sends nothing is closed after header_timeout.
	probe := flood[0]
	_ = probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(probe); err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 408") {
		t.Errorf("an idle connection was not told 408 and closed after header_timeout: %v (read %q)", err, got)
	}
	for _, c := range flood {
		c.Close()
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		req, _ := http.NewRequest("POST", "http://"+listen+"/v1/chat/completions",
			strings.NewReader(`{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no normal call after the flood: %v %v\n%s", resp, err, serve.Stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-serve.exited:
		t.Fatalf("serve exited: %v\n%s", err, serve.Stderr())
	default:
	}
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}
