package sqlitestore_test

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/sqlitestore"
)

// threeRules are the engine benchmark's rules: requests and tokens per
// minute and a concurrency cap, on one subject, high enough never to refuse.
var threeRules = []sluice.Rule{
	{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1 << 40, Window: time.Minute},
	{Name: "tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: 1 << 50, Window: time.Minute},
	{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1 << 20},
}

// budgetRules replace the concurrency cap by a daily token budget, which
// the sqlite store journals: every Settle waits for a group commit.
var budgetRules = []sluice.Rule{
	threeRules[0], threeRules[1],
	{Name: "daily", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricTokens, Limit: 1 << 60, Period: sluice.PeriodDay},
}

// benchAdmitSettle runs Admit then Settle from 32 goroutines (16 per core
// on this 2-core machine) over 64 subjects and reports operations per
// second.
func benchAdmitSettle(b *testing.B, s sluice.Store, rules []sluice.Rule) {
	l, err := sluice.New(sluice.Options{Store: s, Rules: rules})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "key-" + string(rune('A'+i))
	}
	ctx := context.Background()
	b.SetParallelism(32 / max(1, testingCPU()))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			req := sluice.Request{Identity: sluice.Identity{Key: keys[i%len(keys)]}, Max: sluice.Usage{InputTokens: 100, OutputTokens: 100}}
			r, err := l.Admit(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			if err := r.Settle(ctx, sluice.Usage{InputTokens: 100, OutputTokens: 40}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

func testingCPU() int {
	// RunParallel starts SetParallelism x GOMAXPROCS goroutines.
	return runtimeGOMAXPROCS()
}

func openBench(b *testing.B) *sqlitestore.Store {
	s, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(b.TempDir(), "store.db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkAdmitSettle3Rules(b *testing.B) {
	b.Run("store=sqlite", func(b *testing.B) { benchAdmitSettle(b, openBench(b), threeRules) })
	b.Run("store=memory", func(b *testing.B) { benchAdmitSettle(b, memstore.New(memstore.Options{}), threeRules) })
}

func BenchmarkAdmitSettleBudget(b *testing.B) {
	b.Run("store=sqlite", func(b *testing.B) { benchAdmitSettle(b, openBench(b), budgetRules) })
	b.Run("store=memory", func(b *testing.B) { benchAdmitSettle(b, memstore.New(memstore.Options{}), budgetRules) })
}

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }
