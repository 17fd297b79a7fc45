package main

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// createKey runs the built binary's keys create with args and returns the
// key, the last line it prints.
func createKey(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	create := exec.Command(bin, append([]string{"keys", "create"}, args...)...)
	create.Env = env
	out, err := create.CombinedOutput()
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// served is a serve process started by startServe.
type served struct {
	cmd *exec.Cmd
	// exited receives the process's exit once it has ended.
	exited chan error
	mu     sync.Mutex
	stderr strings.Builder
	// serving is closed when the process logs that it serves (in
	// production, where it prints no banner).
	serving     chan struct{}
	servingOnce sync.Once
}

func (s *served) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.stderr.Write(p)
	if strings.Contains(s.stderr.String(), `"msg":"serving"`) {
		s.servingOnce.Do(func() { close(s.serving) })
	}
	return n, err
}

// Stderr is what the process wrote to its standard error so far.
func (s *served) Stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// startServe starts cmd (the binary's serve, or a shell that execs it) and
// waits for its banner, or in production its "serving" log line; it is
// killed at cleanup.
func startServe(t *testing.T, cmd *exec.Cmd) *served {
	t.Helper()
	s := &served{cmd: cmd, exited: make(chan error, 1), serving: make(chan struct{})}
	cmd.Stderr = s
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-s.exited })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "curl http") {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		s.exited <- cmd.Wait()
	}()
	select {
	case <-ready:
	case <-s.serving:
	case err := <-s.exited:
		s.exited <- err
		t.Fatalf("serve exited before its banner: %v\n%s", err, s.Stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", s.Stderr())
	}
	return s
}

// serveCmd is the binary's serve with env.
func serveCmd(bin string, env []string) *exec.Cmd {
	c := exec.Command(bin, "serve")
	c.Env = env
	return c
}
