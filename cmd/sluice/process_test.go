package main

import (
	"bufio"
	"io"
	"os/exec"
	"regexp"
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
	// listen and admin are the addresses it serves on, as its banner or
	// its "serving" line names them: a test gives it port 0 (see
	// anyPort), so that no port it chose can be taken before serve binds it.
	listen, admin string
}

// anyPort is the address a test's serve listens on: a loopback port the
// system chooses when serve binds it, read back from served.
const anyPort = "127.0.0.1:0"

// servedAddrs finds the client and admin addresses in serve's banner line
// or in its "serving" log line (production).
var servedAddrs = regexp.MustCompile(`client API on http://(\S+)\s+admin API on http://(\S+)|"listen":"([^"]+)","admin_listen":"([^"]+)"`)

// servedAt returns the client and admin addresses that serve's banner, or
// its "serving" line, in text names.
func servedAt(text string) (listen, admin string) {
	if m := servedAddrs.FindStringSubmatch(text); m != nil {
		return m[1] + m[3], m[2] + m[4]
	}
	return "", ""
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
	var banner string // the banner's first line, read once ready is closed
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "client API on") {
				banner = sc.Text()
			}
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
		s.listen, s.admin = servedAt(banner)
	case <-s.serving:
		s.listen, s.admin = servedAt(s.Stderr())
	case err := <-s.exited:
		s.exited <- err
		t.Fatalf("serve exited before its banner: %v\n%s", err, s.Stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", s.Stderr())
	}
	if s.listen == "" {
		t.Fatalf("serve named no address it listens on:\n%s", s.Stderr())
	}
	return s
}

// serveCmd is the binary's serve with env.
func serveCmd(bin string, env []string) *exec.Cmd {
	c := exec.Command(bin, "serve")
	c.Env = env
	return c
}
