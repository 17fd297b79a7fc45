package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

// profile records the gateway with perf during one more phase through it
// (saturation, unless -perf-conns or -perf-stream say otherwise), and keeps
// the top of perf's flat report. The phase's figures are not part of the
// tables: perf's sampling costs CPU of its own.
func (b *bench) profile(ctx context.Context, path string) error {
	if _, err := exec.LookPath("perf"); err != nil {
		return fmt.Errorf("-perf: perf is not installed: %w", err)
	}
	rec := exec.Command("perf", "record", "-F", "999", "-g", "-o", path, "-p", strconv.Itoa(b.gw.Pid()))
	var out bytes.Buffer
	rec.Stdout, rec.Stderr = &out, &out
	rec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := rec.Start(); err != nil {
		return fmt.Errorf("perf record: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- rec.Wait() }()
	stopRecord := func() {
		_ = rec.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-rec.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	time.Sleep(500 * time.Millisecond) // let perf attach
	proc.Logf("profiling the gateway with perf for %s", b.o.duration)
	conns, work, what := b.o.conns, b.fast(b.gateway), "requests"
	if b.o.perfConns > 0 {
		conns = b.o.perfConns
	}
	if b.o.perfStream {
		work, what = b.streams(b.gateway), "streamed requests"
	}
	ph, err := runPhase(ctx, "gateway", conns, b.o.duration, b.p, work)
	stopRecord()
	if err != nil {
		return err
	}
	rep := exec.CommandContext(ctx, "perf", "report", "-i", path, "--stdio", "--no-children", "--sort", "symbol",
		"-g", "none", "--percent-limit", "1")
	text, err := rep.Output()
	if err != nil {
		return fmt.Errorf("perf report: %w\n%s", err, out.String())
	}
	var top []string
	for _, line := range strings.Split(string(text), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		top = append(top, line)
		if len(top) == 40 {
			break
		}
	}
	b.profileText = fmt.Sprintf("perf record -F 999 -g -p <gateway> during %s of %s at %d connections: %.0f req/s, gateway %.1f µs/req under perf\nperf report -i %s --stdio --no-children --sort symbol -g none (top, self time):\n%s\n",
		b.o.duration, what, conns, ph.rate(), ph.perRequest(ph.gatewayTicks, b.hz), path, strings.Join(top, "\n"))
	return nil
}
