package sluice_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// The limits of the throughput benchmarks are high enough that nothing is
// ever refused: the benchmarks measure the admission path, not refusals.
const (
	benchRequestsPerMinute = 1 << 40
	benchTokensPerMinute   = 1 << 50
	benchConcurrency       = 1 << 20
	benchParallelSubjects  = 10_000
)

// benchMax and benchUsed are one call's bound and its real usage: 100 input
// tokens plus an output cap of 100, of which 37 were produced.
var (
	benchMax  = sluice.Usage{InputTokens: 100, OutputTokens: 100}
	benchUsed = sluice.Usage{InputTokens: 100, OutputTokens: 37}
)

// benchOptions are a Limiter's over memstore with three rules on the
// subject "key": requests per minute, tokens per minute, concurrency.
func benchOptions() sluice.Options {
	return sluice.Options{
		Store:    memstore.New(memstore.Options{}),
		ServerID: "bench",
		Simple: sluice.Simple{
			RequestsPerMinute: benchRequestsPerMinute,
			TokensPerMinute:   benchTokensPerMinute,
			Concurrency:       benchConcurrency,
			Subject:           "key",
		},
	}
}

// newBenchLimiter returns a Limiter with benchOptions.
func newBenchLimiter(b *testing.B) *sluice.Limiter {
	b.Helper()
	l, err := sluice.New(benchOptions())
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// admitSettle is one call through the engine: Admit with the bound, Settle
// with the real usage.
func admitSettle(ctx context.Context, l *sluice.Limiter, key string) error {
	r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: key}, Max: benchMax})
	if err != nil {
		return fmt.Errorf("admit %q: %w", key, err)
	}
	if err := r.Settle(ctx, benchUsed); err != nil {
		return fmt.Errorf("settle %q: %w", key, err)
	}
	return nil
}

// processCPU returns the CPU time the process has used so far, user and
// system, from /proc/self/stat; false where there is no such file.
func processCPU() (time.Duration, bool) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command name, which may hold spaces: state is
	// field 3, utime 14 and stime 15, in clock ticks of 1/100 s.
	i := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// cpuMeter reports the process CPU time per op, garbage collection
// included, as cpu-ns/op. On a shared machine wall time counts the time the
// benchmark waited for a CPU; CPU time does not, so it compares ours and
// the peer more steadily. For a parallel benchmark it is CPU per op across
// every core, not latency.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuMeter {
	start, ok := processCPU()
	return cpuMeter{start: start, ok: ok}
}

func (m cpuMeter) report(b *testing.B) {
	end, ok := processCPU()
	// Ticks are 10 ms: under 200 ms the figure would be mostly rounding.
	if m.ok && ok && b.N > 0 && end-m.start >= 200*time.Millisecond {
		b.ReportMetric(float64((end-m.start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func BenchmarkAdmitSettle3Rules(b *testing.B) {
	l := newBenchLimiter(b)
	admitSettleLoop(b, l)
	if s := l.Stats(); s.Refused != 0 {
		b.Fatalf("%d admissions refused", s.Refused)
	}
}

// admitSettleLoop admits and settles one subject's calls on l for the
// benchmark, reporting allocations and CPU per op.
func admitSettleLoop(b *testing.B, l *sluice.Limiter) {
	ctx := context.Background()
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		if err := admitSettle(ctx, l, "key-1"); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// xtimeTriple is the nearest x/time/rate equivalent of the three rules. The
// package has no concurrency cap: the third limiter stands in for it, with
// one token reserved and given back per call.
type xtimeTriple struct {
	requests, tokens, concurrency *rate.Limiter
}

func newXTimeTriple() xtimeTriple {
	return xtimeTriple{
		requests:    rate.NewLimiter(rate.Limit(float64(benchRequestsPerMinute)/60), benchRequestsPerMinute),
		tokens:      rate.NewLimiter(rate.Limit(float64(benchTokensPerMinute)/60), benchTokensPerMinute),
		concurrency: rate.NewLimiter(rate.Limit(float64(benchConcurrency)/60), benchConcurrency),
	}
}

// reserveCancel mirrors admitSettle: ReserveN on each limiter at one
// instant, then CancelAt on each. CancelAt is given the reservation's own
// instant: x/time/rate ignores a cancellation whose time has passed, and
// with a later time the peer would skip the refund work our Settle does.
// It gives back the whole reservation, not only the unused part, as the
// package has no partial refund.
func (x xtimeTriple) reserveCancel() error {
	now := time.Now()
	requests := x.requests.ReserveN(now, 1)
	tokens := x.tokens.ReserveN(now, int(benchMax.InputTokens+benchMax.OutputTokens))
	concurrency := x.concurrency.ReserveN(now, 1)
	for _, r := range [...]*rate.Reservation{requests, tokens, concurrency} {
		if !r.OK() || r.DelayFrom(now) > 0 {
			return fmt.Errorf("x/time/rate refused a reservation (delay %v)", r.DelayFrom(now))
		}
	}
	requests.CancelAt(now)
	tokens.CancelAt(now)
	concurrency.CancelAt(now)
	return nil
}

func BenchmarkXTimeRate3(b *testing.B) {
	x := newXTimeTriple()
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		if err := x.reserveCancel(); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// benchKeys returns n distinct subject values.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%06d", i)
	}
	return keys
}

// parallelStart spreads the goroutines of RunParallel over the keys, so
// that they do not walk the same subjects in step.
func parallelStart(seq *atomic.Int64, n int) int {
	return int(seq.Add(1)*7919) % n
}

func BenchmarkAdmitSettle3RulesParallel(b *testing.B) {
	l := newBenchLimiter(b)
	keys := benchKeys(benchParallelSubjects)
	ctx := context.Background()
	runParallel(b, len(keys), func() func(int) error {
		return func(i int) error { return admitSettle(ctx, l, keys[i]) }
	})
	if s := l.Stats(); s.Refused != 0 {
		b.Fatalf("%d admissions refused", s.Refused)
	}
}

// BenchmarkXTimeRate3Parallel finds its limiters by index in a slice: a
// real per-subject deployment would also pay for a map lookup.
func BenchmarkXTimeRate3Parallel(b *testing.B) {
	triples := newXTimeTriples(benchParallelSubjects)
	runParallel(b, len(triples), func() func(int) error {
		return func(i int) error { return triples[i].reserveCancel() }
	})
}

// runParallel runs RunParallel's goroutines over the indexes 0 to n-1, each
// from its own place (parallelStart) and round again, calling an op that
// newOp makes once per goroutine.
func runParallel(b *testing.B, n int, newOp func() func(i int) error) {
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	b.RunParallel(func(pb *testing.PB) {
		op := newOp()
		i := parallelStart(&seq, n)
		for pb.Next() {
			if err := op(i); err != nil {
				b.Error(err)
				return
			}
			if i++; i == n {
				i = 0
			}
		}
	})
	cpu.report(b)
}

func newXTimeTriples(n int) []xtimeTriple {
	triples := make([]xtimeTriple, n)
	for i := range triples {
		triples[i] = newXTimeTriple()
	}
	return triples
}

// subjectKey is the subject value of subject i: 16 bytes, like an API key
// identifier.
func subjectKey(i int) string { return fmt.Sprintf("k%015d", i) }

// newSubjectsLimiter returns a Limiter with one rate rule per key whose
// counters stay live for the whole benchmark: each admission draws 86.4
// seconds from the bucket, so no counter is idle and none is evicted, and
// the burst is large enough that no sample is refused.
func newSubjectsLimiter(b *testing.B) (*sluice.Limiter, *memstore.Store) {
	b.Helper()
	store := memstore.New(memstore.Options{})
	l, err := sluice.New(sluice.Options{
		Store:    store,
		ServerID: "bench",
		Rules: []sluice.Rule{{Name: "daily_requests", Kind: sluice.KindRate, Subject: "key",
			Limit: 1000, Burst: 1 << 30, Window: 24 * time.Hour}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return l, store
}

func fillSubjects(b *testing.B, ctx context.Context, l *sluice.Limiter, n int) {
	b.Helper()
	for i := range n {
		// The key is made here: the store keeps it, as a real store keeps
		// the subjects it counts.
		if _, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Key: subjectKey(i)}}); err != nil {
			b.Fatalf("fill: %v", err)
		}
	}
}

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkSubjects1M measures what a million subjects cost: the heap in
// use per subject once a million keys each hold a live rate counter, and
// the time to admit each of them the first time. It runs once whatever b.N;
// run it with -benchtime 1x.
func BenchmarkSubjects1M(b *testing.B) {
	const subjects = 1_000_000
	ctx := context.Background()
	b.StopTimer()
	l, store := newSubjectsLimiter(b)
	before := heapInuse()
	start := time.Now()
	fillSubjects(b, ctx, l, subjects)
	fill := time.Since(start)
	after := heapInuse()
	if n := store.Len(); n != subjects {
		b.Fatalf("store holds %d counters, want %d: the memory figure would be wrong", n, subjects)
	}
	runtime.KeepAlive(l)
	b.ReportMetric(0, "ns/op") // one measurement, not a loop of ops
	b.ReportMetric((float64(after)-float64(before))/subjects, "bytes/subject")
	b.ReportMetric(float64(fill.Nanoseconds())/subjects, "fill-ns/subject")
}
