package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// lockedBuffer collects a child's output while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const reloadConfig = `rules:
  - name: chat_rpm
    kind: rate
    subject: workspace+user
    limit: LIMIT
    window: 1m
`

// TestServe_AdminReloadMetricsAndLogs runs sluice serve in production mode
// with a config file: a bad config sent by POST /admin/v1/reload is refused
// and the old policy kept, a good one sent by SIGHUP is applied; /metrics
// counts the call; the request log is JSON and holds no secret.
func TestServe_AdminReloadMetricsAndLogs(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	data := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig := func(limit string) {
		if err := os.WriteFile(cfgPath, []byte(strings.Replace(reloadConfig, "LIMIT", limit, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig("100")
	const adminTok = "test-admin-token-0123456789-abcdef"
	env := append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_LISTEN="+anyPort, "SLUICE_ADMIN_LISTEN="+anyPort,
		"SLUICE_CONFIG="+cfgPath, "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_ENV=production", "SLUICE_ADMIN_TOKEN="+adminTok)
	create := exec.Command(bin, "keys", "create", "--workspace", "demo", "--user", "me")
	create.Env = env
	out, err := create.CombinedOutput()
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key := lines[len(lines)-1]

	serve := startServe(t, serveCmd(bin, env))
	listen, adminURL := serve.listen, "http://"+serve.admin
	api := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, adminURL+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminTok)
		req.Header.Set("Accept", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: timed out\n%s", what, serve.Stderr())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("admin listener", func() bool { s, _ := api("GET", "/healthz"); return s == 200 })
	chatLimit := func() float64 {
		t.Helper()
		status, body := api("GET", "/admin/v1/effective?workspace=demo&user=me")
		if status != 200 {
			t.Fatalf("effective = %d %s", status, body)
		}
		var eff struct {
			Limits []struct {
				Rule  string  `json:"rule"`
				Limit float64 `json:"limit"`
			} `json:"limits"`
		}
		_ = json.Unmarshal([]byte(body), &eff)
		for _, l := range eff.Limits {
			if l.Rule == "chat_rpm" {
				return l.Limit
			}
		}
		return -1
	}
	if got := chatLimit(); got != 100 {
		t.Fatalf("chat_rpm limit = %v, want 100", got)
	}

	req, _ := http.NewRequest("POST", "http://"+listen+"/v1/chat/completions",
		strings.NewReader(`{"model":"mock-small","messages":[{"role":"user","content":"hello"}],"max_tokens":16}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat call = %d", resp.StatusCode)
	}

	// A bad config is refused and the running policy kept.
	writeConfig("-1")
	if status, body := api("POST", "/admin/v1/reload"); status != http.StatusUnprocessableEntity || !strings.Contains(body, "must not be negative") {
		t.Fatalf("reload of a bad config = %d %s", status, body)
	}
	if got := chatLimit(); got != 100 {
		t.Fatalf("after a refused reload, chat_rpm limit = %v", got)
	}
	// SIGHUP applies a good one.
	writeConfig("7")
	if err := serve.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("SIGHUP reload", func() bool { return chatLimit() == 7 })
	// The signal's audit entry is written after the new policy is in
	// force, so wait for it too.
	var audit string
	waitFor("SIGHUP reload audited", func() bool {
		var status int
		status, audit = api("GET", "/admin/v1/audit?action=config.reload")
		return status == 200 && strings.Contains(audit, "signal:SIGHUP")
	})
	if n := strings.Count(audit, `"config.reload"`); n != 2 {
		t.Fatalf("reload audit has %d entries, want 2: %s", n, audit)
	}

	// /metrics counts the call, in the text format.
	status, body := api("GET", "/metrics")
	if status != 200 {
		t.Fatalf("/metrics = %d", status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	var admitted float64
	for _, m := range families["sluice_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" && l.GetValue() == "admitted" {
				admitted += m.GetCounter().GetValue()
			}
		}
	}
	if admitted != 1 {
		t.Fatalf("sluice_requests_total{outcome=admitted} = %v", admitted)
	}

	// sluice limits show talks to the running server.
	show := exec.Command(bin, "limits", "show", "--admin-url", adminURL, "--workspace", "demo", "--user", "me")
	show.Env = env
	if out, err := show.CombinedOutput(); err != nil || !strings.Contains(string(out), "chat_rpm") {
		t.Fatalf("limits show: %v\n%s", err, out)
	}

	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	serve.exited <- <-serve.exited // ended; left for the cleanup
	logs := serve.Stderr()
	requests := 0
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("a production log line is not JSON: %q", sc.Text())
		}
		if line["msg"] == "request" {
			requests++
			if line["outcome"] != "admitted" || line["decision_ms"] == nil {
				t.Errorf("request line = %v", line)
			}
		}
	}
	if requests != 1 {
		t.Fatalf("%d request lines, want 1:\n%s", requests, logs)
	}
	for _, secret := range []string{key, key[len(key)-20:], adminTok} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log holds a secret:\n%s", logs)
		}
	}
}
