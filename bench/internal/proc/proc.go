// Package proc starts and stops the processes of the benchmark harnesses:
// each in its own process group, its output in a log file, stopped by its
// harness on every path out; and it cleans up after them.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// Build builds the main package pkg of the module at src into out.
func Build(ctx context.Context, src, pkg, out string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = src
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, buf.String())
	}
	return out, nil
}

// Done is closed once the process has ended.
func (c *Child) Done() <-chan struct{} { return c.done }

// ExitCode is the process's exit status, once Done is closed.
func (c *Child) ExitCode() int { return c.cmd.ProcessState.ExitCode() }

// Kill9 kills the process group at once, as a crash would.
func (c *Child) Kill9() {
	_ = syscall.Kill(-c.Pid(), syscall.SIGKILL)
	<-c.done
}

// Child is a process the harness started, in its own process group so that
// stopping it also stops anything it started.
type Child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// SluiceRoot returns the directory of the sluice module the harnesses
// measure: the repository root, which bench/go.mod's replace points at.
func SluiceRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluicehq/sluice").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/sluicehq/sluice: %w (run from the bench module: cd bench)", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", errors.New("the sluice module has no directory: run from the bench module (cd bench)")
	}
	return dir, nil
}

// BenchRoot returns the directory of the bench module, the harnesses' own.
func BenchRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: run from the bench module (cd bench)")
	}
	return filepath.Dir(mod), nil
}

// ChildEnv is the harness's environment without any SLUICE_ variable, plus
// extra.
func ChildEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Start runs bin with args, its output in a log file under dir.
func Start(name, dir, bin string, env []string, args ...string) (*Child, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	// Pdeathsig is a backstop for a harness killed with SIGKILL; the
	// deferred stop is the normal way out.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &Child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, and SIGKILL if it is still
// there after grace.
func (c *Child) Stop(grace time.Duration) {
	if c == nil || c.Exited() {
		return
	}
	pgid := -c.Pid()
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		select {
		case <-c.done:
		case <-time.After(grace):
		}
	}
}

// Tail returns the last lines of the child's log, for error messages.
func (c *Child) Tail(lines int) string {
	data, _ := os.ReadFile(c.log)
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// WaitHTTP polls url until it answers 200, the child exits or timeout
// passes.
func WaitHTTP(c *Child, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c.Exited() {
			return fmt.Errorf("%s exited before it answered %s:\n%s", c.name, url, c.Tail(20))
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer %s within %s:\n%s", c.name, url, timeout, c.Tail(20))
}

// FreePorts returns n loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// DeleteRedisKeys deletes, from the Redis server at redisURL, the keys
// whose name holds runID: a harness's counters, named by the run's
// workspaces or org.
func DeleteRedisKeys(redisURL, runID string) {
	opt, err := rueidis.ParseURL(redisURL)
	if err != nil {
		return
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("*"+runID+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return
		}
		for _, k := range e.Elements {
			c.Do(ctx, c.B().Unlink().Key(k).Build())
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}

// Logf writes a harness's progress line to stderr, with the time.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
}

// Marker returns the value of a marker such as "ws=acme" in a request body
// (a harness tags each call's prompt with one, so that a mock provider can
// tell whose call it answers), or "" when there is none.
func Marker(body []byte, key string) string {
	i := bytes.Index(body, []byte(key+"="))
	if i < 0 {
		return ""
	}
	rest := body[i+len(key)+1:]
	if j := bytes.IndexAny(rest, " \"]"); j >= 0 {
		return string(rest[:j])
	}
	return ""
}
