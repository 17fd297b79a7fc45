package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

// The quick knobs are set high, not to 0: the three default rules stay on
// and are checked on every request, but none refuses during the run.
var knobs = []string{
	"SLUICE_RATE_PER_MINUTE=100000000",          // 1.6 million requests a second
	"SLUICE_DAILY_TOKEN_BUDGET=100000000000000", // 10^14 tokens a day
	"SLUICE_MAX_IN_FLIGHT=100000",
}

// buildSluice builds the sluice binary from the module at src into dir.
func buildSluice(ctx context.Context, src, dir string) (string, error) {
	return proc.Build(ctx, src, "./cmd/sluice", filepath.Join(dir, "sluice"))
}

// buildBareProxy builds the bare fasthttp proxy from the bench module at
// src into dir.
func buildBareProxy(ctx context.Context, src, dir string) (string, error) {
	return proc.Build(ctx, src, "./gateway/bareproxy", filepath.Join(dir, "bareproxy"))
}

// exportRev writes the tree of git revision rev of the repository at src
// into dir (git archive), so that the build does not see uncommitted
// changes, and returns the revision's short hash.
func exportRev(ctx context.Context, src, rev, dir string) (string, error) {
	hash, err := exec.CommandContext(ctx, "git", "-C", src, "rev-parse", "--short", "--verify", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse %s: %w", rev, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "git", "-C", src, "archive", "--format=tar", rev)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var errs bytes.Buffer
	archive.Stderr, untar.Stderr = &errs, &errs
	if err := archive.Start(); err != nil {
		return "", err
	}
	if err := untar.Run(); err != nil {
		_ = archive.Wait()
		return "", fmt.Errorf("git archive %s | tar -x: %w\n%s", rev, err, errs.String())
	}
	if err := archive.Wait(); err != nil {
		return "", fmt.Errorf("git archive %s: %w\n%s", rev, err, errs.String())
	}
	return strings.TrimSpace(string(hash)), nil
}

// writeConfig writes the gateway's config: the mock at mockAddr serving
// mock-small and mock-large, the paced mock at pacedAddr serving
// paced-small, state under dataDir, the default store (embedded SQLite),
// then extra.
func writeConfig(path, listen, adminListen, dataDir, mockAddr, pacedAddr, extra string, cacheTTL time.Duration) error {
	cache := ""
	if cacheTTL > 0 {
		cache = fmt.Sprintf("    cache: {ttl: %s}\n", cacheTTL)
	}
	cfg := fmt.Sprintf(`# Written by go run -C bench ./gateway.
listen: %s
admin_listen: %s
data_dir: %s
providers:
  - name: mock
    kind: mock
    base_url: http://%s
  - name: paced
    kind: mock
    base_url: http://%s
models:
  - name: mock-small
    provider: mock
    price: {input: 0.15, output: 0.60}
    max_output_tokens: 4096
    context_window: 128000
%s  - name: mock-large
    provider: mock
    price: {input: 3, cached_input: 0.30, output: 15}
    max_output_tokens: 8192
    context_window: 200000
  - name: paced-small
    provider: paced
    upstream_name: mock-small
    price: {input: 0.15, output: 0.60}
    max_output_tokens: 4096
    context_window: 128000
`, listen, adminListen, dataDir, mockAddr, pacedAddr, cache) + extra + "\n"
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// createKey runs "sluice keys create" against the config's data directory
// and returns the secret, printed on the last line.
func createKey(ctx context.Context, bin, cfgPath string, env []string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, "keys", "create", "--config", cfgPath, "--workspace", "bench", "--user", "load")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("sluice keys create: %w\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key := strings.TrimSpace(lines[len(lines)-1])
	if key == "" || strings.ContainsAny(key, " \t") {
		return "", fmt.Errorf("sluice keys create: no key on the last line:\n%s", out)
	}
	return key, nil
}

// clockTicks returns the kernel's clock ticks per second (getconf CLK_TCK).
func clockTicks() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
}

// cpuTicks returns a process's user plus system time, in clock ticks,
// from /proc/<pid>/stat; pid 0 means the harness itself.
func cpuTicks(pid int) (int64, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	ticks, err := parseStatTicks(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return ticks, nil
}

// parseStatTicks returns utime+stime from the text of /proc/<pid>/stat.
func parseStatTicks(data []byte) (int64, error) {
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15,
	// the 12th and 13th after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("unexpected format: no command name")
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected format: too few fields")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return utime + stime, nil
}

// memKiB returns the VmRSS and VmHWM (peak) lines of /proc/<pid>/status,
// in KiB.
func memKiB(pid int) (rss, hwm int64, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if name == "VmRSS" {
			rss = n
		} else {
			hwm = n
		}
	}
	return rss, hwm, sc.Err()
}

// loadInfo is the load average and, where the kernel reports it, the share
// of the last 10 s during which some task waited for a CPU.
func loadInfo() string {
	s := "load ?"
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(data))
		if len(f) >= 3 {
			s = "load " + strings.Join(f[:3], " ")
		}
	}
	if data, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		for _, field := range strings.Fields(string(data)) {
			if v, ok := strings.CutPrefix(field, "avg10="); ok {
				s += ", cpu pressure " + v + "%"
				break
			}
		}
	}
	return s
}
