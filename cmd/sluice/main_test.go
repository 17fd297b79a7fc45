package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain makes the directory buildSluice builds the command in, lets more
// parallel tests run at once than there are CPUs, and ends the package's
// output with the PostgreSQL tests it skipped.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	built.dir = dir
	// The parallel tests mostly wait on the processes they start: a
	// reservation's deadline and the sweeper's round, a restart.
	testenv.WaitingTests(4)
	code := testenv.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// built is the command, built once for every test that runs it.
var built struct {
	dir  string // made by TestMain
	once sync.Once
	bin  string
	err  error
}

// buildSluice builds the command once per test binary. It compiles as
// scripts/release.sh does (no cgo, -trimpath, -tags grpcnotrace; only the
// link differs), so that TestRelease_StampsVersionAndRevision, which runs
// after it, finds every package in the build cache and only links.
func buildSluice(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		bin := filepath.Join(built.dir, "sluice")
		cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-o", bin, ".")
		cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// TestServe_FirstCallOnAFreshDataDirectory runs what the README tells a
// newcomer: keys create, serve with no config, a first call with the
// OpenAI SDK, then a clean shutdown on SIGTERM.
func TestServe_FirstCallOnAFreshDataDirectory(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	data := t.TempDir()
	env := append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_LISTEN="+anyPort, "SLUICE_ADMIN_LISTEN="+anyPort,
		"SLUICE_CONFIG=", "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_ENV=", "SLUICE_ADMIN_TOKEN=")

	create := exec.Command(bin, "keys", "create", "--workspace", "demo", "--user", "me")
	create.Env = env
	out, err := create.CombinedOutput()
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key := lines[len(lines)-1]
	if !strings.HasPrefix(key, "sk-sluice-") {
		t.Fatalf("last line of keys create is %q, want the key", key)
	}

	serve := exec.Command(bin, "serve")
	serve.Env = env
	var stderr bytes.Buffer
	serve.Stderr = &stderr
	stdout, _ := serve.StdoutPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serve.Process.Kill() })
	banner := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var all strings.Builder
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "curl http") {
				banner <- all.String()
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var listen string
	select {
	case b := <-banner:
		if listen, _ = servedAt(b); listen == "" || strings.HasSuffix(listen, ":0") || !strings.Contains(b, "keys create") {
			t.Fatalf("banner does not say where it listens and how to call:\n%s", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", stderr.String())
	}

	client := openai.NewClient(option.WithBaseURL("http://"+listen+"/v1"), option.WithAPIKey(key))
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "mock-small",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello [mock tokens=5]")},
		MaxTokens: openai.Int(16),
	})
	if err != nil {
		t.Fatalf("first call: %v\n%s", err, stderr.String())
	}
	if resp.Usage.CompletionTokens != 5 {
		t.Fatalf("usage %+v", resp.Usage)
	}
	// The model list needs the key, and lists what it may call.
	wrong := openai.NewClient(option.WithBaseURL("http://"+listen+"/v1"), option.WithAPIKey("sk-sluice-wrong"), option.WithMaxRetries(0))
	if _, err := wrong.Models.List(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("models list with a wrong key: %v, want 401", err)
	}
	page, err := client.Models.List(context.Background())
	if err != nil || len(page.Data) != 2 || page.Data[0].ID != "mock-small" || page.Data[1].ID != "mock-large" {
		t.Errorf("models list = %+v, %v; want mock-small and mock-large", page, err)
	}
	// A session on the default terms: mock-small, an hour, charged by the
	// calls that carry it.
	mint, _ := http.NewRequest("POST", "http://"+listen+"/v1/sessions", nil)
	mint.Header.Set("Authorization", "Bearer "+key)
	mr, err := http.DefaultClient.Do(mint)
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		ID    string `json:"id"`
		Model string `json:"model"`
		Used  struct {
			Turns  int64 `json:"turns"`
			Tokens int64 `json:"tokens"`
		} `json:"used"`
	}
	_ = json.NewDecoder(mr.Body).Decode(&sess)
	mr.Body.Close()
	if mr.StatusCode != 201 || sess.Model != "mock-small" {
		t.Fatalf("mint: %d %+v", mr.StatusCode, sess)
	}
	if _, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "mock-small",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("in a session [mock tokens=3]")},
		MaxTokens: openai.Int(16),
	}, option.WithHeader("X-Sluice-Session", sess.ID)); err != nil {
		t.Fatalf("call in the session: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sess.Used.Turns != 1 || sess.Used.Tokens == 0 || sess.Used.Tokens > 16+16 {
		if time.Now().After(deadline) {
			t.Fatalf("session after one call: %+v", sess)
		}
		time.Sleep(20 * time.Millisecond)
		get, _ := http.NewRequest("GET", "http://"+listen+"/v1/sessions/"+sess.ID, nil)
		get.Header.Set("Authorization", "Bearer "+key)
		gr, err := http.DefaultClient.Do(get)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(gr.Body).Decode(&sess)
		gr.Body.Close()
	}

	// A bad key is refused with 401.
	r, err := http.Post("http://"+listen+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 401 {
		t.Fatalf("no key: status %d, want 401", r.StatusCode)
	}

	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v\n%s", err, stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}

	list := exec.Command(bin, "keys", "list")
	list.Env = env
	out, err = list.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "demo") {
		t.Fatalf("keys list: %v\n%s", err, out)
	}
}

func TestMigrate_PostgresStoreAndSQLiteCatalog(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	bin := buildSluice(t)
	data := t.TempDir()
	cmd := exec.Command(bin, "migrate", "--store", url)
	cmd.Env = append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_CONFIG=", "SLUICE_DATABASE=")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "migrated") {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(data, "catalog.db")); err != nil {
		t.Fatalf("the catalog was not created: %v", err)
	}
	// A second run finds nothing to do and succeeds; the catalog in
	// PostgreSQL too.
	cmd = exec.Command(bin, "migrate", "--store", url, "--database", url)
	cmd.Env = append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_CONFIG=", "SLUICE_DATABASE=")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "catalog postgres://") {
		t.Fatalf("second migrate: %v\n%s", err, out)
	}
}
