package main

import (
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// machineInfo describes where and what was measured.
type machineInfo struct {
	nproc  int
	cpu    string
	goVer  string
	commit string
	load   string
}

func machine(src string) machineInfo {
	m := machineInfo{nproc: runtime.NumCPU(), cpu: "unknown", goVer: runtime.Version(), commit: "unknown"}
	if out, err := exec.Command("lscpu").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "Model name:"); ok {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	cmd := exec.Command("git", "rev-parse", "--short", "HEAD")
	cmd.Dir = src
	if out, err := cmd.Output(); err == nil {
		m.commit = strings.TrimSpace(string(out))
		// Say whether the built code differs from the commit.
		cmd := exec.Command("git", "status", "--porcelain", "--", "cmd", "gateway", "internal", "config", "catalog", "store", "llm", "*.go", "go.mod")
		cmd.Dir = src
		if out, err := cmd.Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
			m.commit += " with uncommitted changes"
		}
	}
	return m
}

// median returns the median of xs (the mean of the middle two for an even
// count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// over returns f of every round's phase of the given kind and target.
func (b *bench) over(kind func(*round) map[string]*phase, name string, f func(*phase) float64) []float64 {
	var xs []float64
	for _, r := range b.rounds {
		if ph := kind(r)[name]; ph != nil {
			xs = append(xs, f(ph))
		}
	}
	return xs
}

func saturation(r *round) map[string]*phase { return r.saturation }
func single(r *round) map[string]*phase     { return r.single }
func streamed(r *round) map[string]*phase   { return r.streamed }

func rateOf(ph *phase) float64 { return ph.rate() }
func p50Of(ph *phase) float64  { return float64(ph.quantile(0.5).Microseconds()) }
func p99Of(ph *phase) float64  { return float64(ph.quantile(0.99).Microseconds()) }

// paired returns f(gateway phase, direct phase) for every round.
func (b *bench) paired(kind func(*round) map[string]*phase, f func(gw, direct *phase) float64) []float64 {
	return b.pairedWith(kind, "gateway", f)
}

// pairedWith returns f(phase of the named target, direct phase) for every
// round.
func (b *bench) pairedWith(kind func(*round) map[string]*phase, name string, f func(t, direct *phase) float64) []float64 {
	var xs []float64
	for _, r := range b.rounds {
		t, direct := kind(r)[name], kind(r)["direct"]
		if t != nil && direct != nil {
			xs = append(xs, f(t, direct))
		}
	}
	return xs
}

func (b *bench) command() string {
	cmd := "go run -C bench ./gateway"
	o := b.o
	if o.duration != 20*time.Second {
		cmd += " -duration " + o.duration.String()
	}
	if o.rounds != 3 {
		cmd += fmt.Sprintf(" -rounds %d", o.rounds)
	}
	if o.conns != 32 {
		cmd += fmt.Sprintf(" -conns %d", o.conns)
	}
	if o.warmup != 3*time.Second {
		cmd += " -warmup " + o.warmup.String()
	}
	if o.chunkInterval != 20*time.Millisecond {
		cmd += " -chunk-interval " + o.chunkInterval.String()
	}
	if o.rev != "" {
		cmd += " -rev " + o.rev
	}
	if o.store != "" {
		cmd += " -store " + o.store
	}
	if o.noLimits {
		cmd += " -no-limits"
	}
	if o.pacedStreams != 5 {
		cmd += fmt.Sprintf(" -paced-streams %d", o.pacedStreams)
	}
	if o.noBare {
		cmd += " -no-bare"
	}
	return cmd
}

// report prints the markdown report: machine, per-round figures, medians
// and the targets.
func (b *bench) report(w io.Writer) {
	m := b.start
	fmt.Fprintf(w, "\nMachine: %d CPUs (nproc), %s; %s; sluice %s.\n", m.nproc, m.cpu, m.goVer, m.commit)
	store, limits := "embedded SQLite (the default)", "the three default rules on, limits raised so that none refuses"
	if b.o.store != "" {
		store = b.o.store
	}
	if b.o.noLimits {
		limits = "the three default rules off (knobs at 0)"
	}
	fmt.Fprintf(w, "Gateway: store %s; %s.\n", store, limits)
	fmt.Fprintf(w, "Load: at the start %s; at the end %s.\n", m.load, b.endLoad)
	fmt.Fprintf(w, "\nCommand: `%s`\n", b.command())
	fmt.Fprintf(w, "\n%d rounds; each: %s at %d connections, %s at 1 connection, %s of streams at 1 connection, %d paced streams, direct and through the gateway, the order alternating.\n",
		len(b.rounds), b.o.duration, b.o.conns, b.o.duration/2, b.o.duration/2, b.o.pacedStreams)
	if b.bare != nil {
		fmt.Fprintf(w, "For scale, the same phases (not the paced streams) through a bare fasthttp reverse proxy in front of the same mock (target \"bare\": bench/gateway/bareproxy, its own process; fasthttp.HostClient Do on the server's request and response, response bodies streamed; no auth, no parsing, no limits), in the same rounds, its place in the order rotating.\n")
	}

	fmt.Fprintf(w, "\n#### Per round\n\n")
	// With the bare proxy, one more column: its CPU per request.
	bareHead, bareSep := "", ""
	if b.bare != nil {
		bareHead, bareSep = " bare proxy CPU/req |", " ---: |"
	}
	bareCell := func(ph *phase) string {
		if b.bare == nil {
			return ""
		}
		return fmt.Sprintf(" %.1f µs |", ph.perRequest(ph.bareTicks, b.hz))
	}
	fmt.Fprintln(w, "| round | phase | target | conns | req/s | p50 | p99 | gateway CPU/req |"+bareHead+" mock CPU/req | load generator CPU/req | failed |")
	fmt.Fprintln(w, "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"+bareSep+" ---: | ---: | ---: |")
	for i, r := range b.rounds {
		for _, k := range []struct {
			name string
			of   func(*round) map[string]*phase
		}{{"saturation", saturation}, {"1 connection", single}, {"stream (p50/p99 = TTFB)", streamed}} {
			for _, name := range r.order {
				ph := k.of(r)[name]
				fmt.Fprintf(w, "| %d | %s | %s | %d | %.0f | %s | %s | %.1f µs |%s %.1f µs | %.1f µs | %d |\n", i+1, k.name, name, ph.conns,
					ph.rate(), micros(ph.quantile(0.5)), micros(ph.quantile(0.99)),
					ph.perRequest(ph.gatewayTicks, b.hz), bareCell(ph), ph.perRequest(ph.mockTicks, b.hz), ph.perRequest(ph.clientTicks, b.hz), ph.failed)
			}
		}
	}

	fmt.Fprintf(w, "\n#### Medians over rounds\n\n")
	fmt.Fprintln(w, "| phase | target | req/s | p50 | p99 | gateway CPU/req |"+bareHead+" mock CPU/req | failed |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: |"+bareSep+" ---: | ---: |")
	names := []string{"direct", "gateway"}
	if b.bare != nil {
		names = append(names, "bare")
	}
	for _, k := range []struct {
		name string
		of   func(*round) map[string]*phase
	}{{fmt.Sprintf("saturation, %d conns", b.o.conns), saturation}, {"1 connection", single}, {"stream, 1 conn (p50/p99 = TTFB)", streamed}} {
		for _, name := range names {
			failed := 0
			for _, f := range b.over(k.of, name, func(ph *phase) float64 { return float64(ph.failed) }) {
				failed += int(f)
			}
			gwLabel := fmt.Sprintf("%.1f µs", median(b.over(k.of, name, func(ph *phase) float64 { return ph.perRequest(ph.gatewayTicks, b.hz) })))
			if name != "gateway" {
				gwLabel = "(idle)"
			}
			bareLabel := ""
			if b.bare != nil {
				bareLabel = " (idle) |"
				if name == "bare" {
					bareLabel = fmt.Sprintf(" %.1f µs |", median(b.over(k.of, name, func(ph *phase) float64 { return ph.perRequest(ph.bareTicks, b.hz) })))
				}
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f µs | %.0f µs | %s |%s %.1f µs | %d |\n", k.name, name,
				median(b.over(k.of, name, rateOf)), median(b.over(k.of, name, p50Of)), median(b.over(k.of, name, p99Of)),
				gwLabel, bareLabel, median(b.over(k.of, name, func(ph *phase) float64 { return ph.perRequest(ph.mockTicks, b.hz) })), failed)
		}
	}

	ratios := b.paired(saturation, func(gw, d *phase) float64 { return gw.rate() / d.rate() })
	cpu := b.over(saturation, "gateway", func(ph *phase) float64 { return ph.perRequest(ph.gatewayTicks, b.hz) })
	cpu1 := b.over(single, "gateway", func(ph *phase) float64 { return ph.perRequest(ph.gatewayTicks, b.hz) })
	added := b.paired(single, func(gw, d *phase) float64 { return float64((gw.quantile(0.5) - d.quantile(0.5)).Microseconds()) })
	addedTTFB := b.paired(streamed, func(gw, d *phase) float64 { return float64((gw.quantile(0.5) - d.quantile(0.5)).Microseconds()) })
	pacedOf := func(name string) (chunks, held, short int, gaps []time.Duration) {
		for _, r := range b.rounds {
			if p := r.paced[name]; p != nil {
				chunks += p.chunks
				held += p.heldBack
				short += p.short
				gaps = append(gaps, p.gaps...)
			}
		}
		slices.Sort(gaps)
		return chunks, held, short, gaps
	}

	fmt.Fprintf(w, "\n#### Paced streams (mock --chunk-interval %s, 16 content chunks each)\n\n", b.o.chunkInterval)
	fmt.Fprintf(w, "| target | streams | content chunks | gap min | gap p50 | gap max | held back (gap < %s) | short gaps (< %s) |\n",
		b.o.chunkInterval/10, b.o.chunkInterval/2)
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, name := range []string{"direct", "gateway"} {
		chunks, held, short, gaps := pacedOf(name)
		p := &pacing{gaps: gaps}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %d | %d |\n", name, len(b.rounds)*b.o.pacedStreams, chunks,
			micros(p.quantile(0)), micros(p.quantile(0.5)), micros(p.quantile(1)), held, short)
	}
	gwChunks, heldGW, shortGW, _ := pacedOf("gateway")
	directChunks, heldDirect, shortDirect, _ := pacedOf("direct")

	fmt.Fprintf(w, "\nGateway memory after the run: VmRSS %.1f MiB (peak VmHWM %.1f MiB).\n", float64(b.rssKiB)/1024, float64(b.hwmKiB)/1024)

	fmt.Fprintf(w, "\n#### Targets\n\n")
	fmt.Fprintln(w, "| target | measured (median over rounds; per round) | result |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	verdict := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "**fail**"
	}
	fmt.Fprintf(w, "| saturation throughput through the gateway ≥ 35%% of direct | %.0f%% (%s) | %s |\n",
		100*median(ratios), list(ratios, "%.0f%%", 100), verdict(median(ratios) >= 0.35))
	fmt.Fprintf(w, "| gateway CPU ≤ 100 µs per request (saturation) | %.1f µs (%s; at 1 connection %.1f µs) | %s |\n",
		median(cpu), list(cpu, "%.1f", 1), median(cpu1), verdict(median(cpu) <= 100))
	fmt.Fprintf(w, "| added p50 at 1 connection ≤ 100 µs | %.0f µs (%s) | %s |\n",
		median(added), list(added, "%.0f", 1), verdict(median(added) <= 100))
	fmt.Fprintf(w, "| streaming: added time to first byte ≤ 200 µs | %.0f µs (%s) | %s |\n",
		median(addedTTFB), list(addedTTFB, "%.0f", 1), verdict(median(addedTTFB) <= 200))
	fmt.Fprintf(w, "| streaming: chunks never held back | %d of %d gaps under %s through the gateway (direct: %d); under %s: %d through, %d direct; %d chunks direct, %d through | %s |\n",
		heldGW, gwChunks-len(b.rounds)*b.o.pacedStreams, b.o.chunkInterval/10, heldDirect, b.o.chunkInterval/2, shortGW, shortDirect,
		directChunks, gwChunks, pacingVerdict(heldGW, heldDirect, gwChunks, directChunks))
	fmt.Fprintf(w, "| resident memory after the run < 100 MiB | %.1f MiB | %s |\n", float64(b.rssKiB)/1024, verdict(b.rssKiB < 100*1024))
	if b.bare != nil {
		b.reportBare(w, added, addedTTFB)
	}
	if b.profileText != "" {
		fmt.Fprintf(w, "\n#### Profile\n\n```\n%s```\n", b.profileText)
	}
}

// pacingVerdict judges the paced streams. A gateway that buffered would
// deliver chunks together in most streams; a reader descheduled for longer
// than the interval on a busy machine makes a few such pairs on either path,
// so a count no higher than the direct path's in the same run is noise.
func pacingVerdict(heldGW, heldDirect, gwChunks, directChunks int) string {
	switch {
	case gwChunks == 0 || gwChunks != directChunks:
		return "**fail** (chunks lost)"
	case heldGW == 0:
		return "pass"
	case heldGW <= heldDirect:
		return "pass (no more than direct: scheduling noise)"
	}
	return "**fail**"
}

// list formats xs for a table cell.
func list(xs []float64, format string, scale float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x*scale)
	}
	return strings.Join(parts, ", ")
}

// reportBare adds the bare proxy's lines under the targets: what a proxy
// that does nothing adds in the same run, and the gateway's figures less
// those. They are for scale, not targets. added and addedTTFB are the
// gateway's per-round added p50 at 1 connection and added TTFB.
func (b *bench) reportBare(w io.Writer, added, addedTTFB []float64) {
	addedP50 := func(t, d *phase) float64 { return float64((t.quantile(0.5) - d.quantile(0.5)).Microseconds()) }
	bAdded := b.pairedWith(single, "bare", addedP50)
	bTTFB := b.pairedWith(streamed, "bare", addedP50)
	bRatios := b.pairedWith(saturation, "bare", func(t, d *phase) float64 { return t.rate() / d.rate() })
	bCPU := b.over(saturation, "bare", func(ph *phase) float64 { return ph.perRequest(ph.bareTicks, b.hz) })
	bCPU1 := b.over(single, "bare", func(ph *phase) float64 { return ph.perRequest(ph.bareTicks, b.hz) })
	// The gateway's added latency beyond the bare proxy's, round by round.
	minus := func(xs, ys []float64) []float64 {
		var d []float64
		for i := range min(len(xs), len(ys)) {
			d = append(d, xs[i]-ys[i])
		}
		return d
	}
	overP50, overTTFB := minus(added, bAdded), minus(addedTTFB, bTTFB)
	fmt.Fprintf(w, "| bare fasthttp proxy, for scale: added p50 at 1 connection %.0f µs, added TTFB %.0f µs, throughput %.0f%% of direct, CPU %.1f µs/req | added p50 %s; added TTFB %s; throughput %s; CPU %s at saturation (at 1 connection %.1f µs) | (for scale) |\n",
		median(bAdded), median(bTTFB), 100*median(bRatios), median(bCPU),
		list(bAdded, "%.0f", 1), list(bTTFB, "%.0f", 1), list(bRatios, "%.0f%%", 100), list(bCPU, "%.1f", 1), median(bCPU1))
	fmt.Fprintf(w, "| the gateway beyond the bare proxy, for scale: added p50 at 1 connection %+.0f µs, added TTFB %+.0f µs | added p50 %s; added TTFB %s | (for scale) |\n",
		median(overP50), median(overTTFB), list(overP50, "%+.0f", 1), list(overTTFB, "%+.0f", 1))
	// Issue 26's budget, against the bare proxy of the same rounds.
	gwCPU := b.over(saturation, "gateway", func(ph *phase) float64 { return ph.perRequest(ph.gatewayTicks, b.hz) })
	cpuRatio := make([]float64, 0, len(gwCPU))
	for i := range min(len(gwCPU), len(bCPU)) {
		cpuRatio = append(cpuRatio, gwCPU[i]/bCPU[i])
	}
	verdict := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "**fail**"
	}
	fmt.Fprintf(w, "| budget: gateway CPU per request ≤ 2.0x the bare proxy's (saturation) | %.2fx (%s) | %s |\n",
		median(cpuRatio), list(cpuRatio, "%.2fx", 1), verdict(median(cpuRatio) <= 2.0))
	fmt.Fprintf(w, "| budget: added p50 at 1 connection ≤ the bare proxy's + 60 µs | %+.0f µs (%s) | %s |\n",
		median(overP50), list(overP50, "%+.0f", 1), verdict(median(overP50) <= 60))
	fmt.Fprintf(w, "| budget: gateway peak resident memory (VmHWM) ≤ 64 MiB | %.1f MiB | %s |\n",
		float64(b.hwmKiB)/1024, verdict(b.hwmKiB <= 64*1024))
}
