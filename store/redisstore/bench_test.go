package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
)

// The benchmarks compare the 3-rule admission (a request rate, a token rate
// and a concurrency cap on one subject, admitted and settled: one round trip
// each) with go-redis/redis_rate's Allow (one GCRA rule, one round trip) on
// the same server, each from 32 concurrent callers. Run
//
//	SLUICE_TEST_REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench . -benchtime 5x ./store/redisstore/
//
// BenchmarkVersusRedisRate alternates the two in short rounds, so that both
// see the same machine (a shared CI machine's load moves a lot), and reports
// both rates and their ratio.
const benchCallers = 32

// benchOps returns a function that admits and settles the 3-rule request.
func benchOps(b *testing.B) func(ctx context.Context) error {
	return tenantOps(b, redisURL(b), 1)
}

// threeRuleLimiter returns a Limiter over s with the benchmarks' three
// rules on the subject "key": requests and tokens per minute, set high
// enough never to refuse, and a cap of 1,000 calls in flight.
func threeRuleLimiter(b *testing.B, s *redisstore.Store) *sluice.Limiter {
	l, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{
		{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1_000_000_000, Window: time.Minute},
		{Name: "tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: 1_000_000_000, Window: time.Minute},
		{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1000},
	}})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// tenantOps returns a function that admits and settles the 3-rule request
// of one of tenants subjects, in turn, on the store at url.
func tenantOps(b *testing.B, url string, tenants int) func(ctx context.Context) error {
	l := threeRuleLimiter(b, openStore(b, redisstore.Options{URL: url}))
	reqs := make([]sluice.Request, tenants)
	for i := range reqs {
		reqs[i] = sluice.Request{Identity: sluice.Identity{Key: fmt.Sprintf("tenant-%d", i)}, Max: sluice.Usage{InputTokens: 100, OutputTokens: 100}}
	}
	used := sluice.Usage{InputTokens: 100, OutputTokens: 40}
	var next atomic.Int64
	return func(ctx context.Context) error {
		r, err := l.Admit(ctx, reqs[next.Add(1)%int64(tenants)])
		if err != nil {
			return err
		}
		return r.Settle(ctx, used)
	}
}

// peerOps returns a function that calls redis_rate's Allow.
func peerOps(b *testing.B) func(ctx context.Context) error {
	opts, err := redis.ParseURL(redisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	key := freshPrefix() + ":redis_rate"
	b.Cleanup(func() {
		rdb.Del(context.Background(), "rate:"+key)
		rdb.Close()
	})
	limiter := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Minute}
	return func(ctx context.Context) error {
		res, err := limiter.Allow(ctx, key, limit)
		if err == nil && res.Allowed == 0 {
			b.Error("redis_rate refused")
		}
		return err
	}
}

func runParallel(b *testing.B, fn func(ctx context.Context) error) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchCallers + procs - 1) / procs)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := fn(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkAdmitSettle3Rules admits and settles the 3-rule request.
func BenchmarkAdmitSettle3Rules(b *testing.B) { runParallel(b, benchOps(b)) }

// BenchmarkRedisRateAllow is the peer: redis_rate's Allow.
func BenchmarkRedisRateAllow(b *testing.B) { runParallel(b, peerOps(b)) }

// BenchmarkVersusRedisRate runs, per iteration, half a second of each,
// alternating, and reports the rates over all iterations and their ratio.
func BenchmarkVersusRedisRate(b *testing.B) {
	ours, peer := benchOps(b), peerOps(b)
	ctx := context.Background()
	hammer := func(fn func(ctx context.Context) error) int64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(500 * time.Millisecond)
		for range benchCallers {
			wg.Go(func() {
				for time.Now().Before(end) {
					if err := fn(ctx); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return n.Load()
	}
	hammer(ours) // warm up both
	hammer(peer)
	b.ResetTimer()
	var oursN, peerN int64
	for i := range b.N {
		if i%2 == 0 {
			oursN += hammer(ours)
			peerN += hammer(peer)
		} else {
			peerN += hammer(peer)
			oursN += hammer(ours)
		}
	}
	secs := float64(b.N) * 0.5
	b.ReportMetric(float64(oursN)/secs, "3rule-ops/s")
	b.ReportMetric(float64(peerN)/secs, "redis_rate-ops/s")
	b.ReportMetric(float64(oursN)/float64(peerN), "ratio")
}

// BenchmarkTenants admits and settles the 3-rule request over 1,000 tenants
// from 32 callers, on the standalone server and on the three-master
// Cluster of the tests.
func BenchmarkTenants(b *testing.B) {
	for _, tc := range []struct{ name, url string }{{"standalone", redisURL(b)}, {"cluster", clusterURL(b)}} {
		b.Run(tc.name, func(b *testing.B) { runParallel(b, tenantOps(b, tc.url, 1000)) })
	}
}

// BenchmarkAdmitSettleOneCaller admits and settles the 3-rule request from
// one caller, one call after the other: the latency of a lone client, where
// the benchmarks above measure throughput. Overlapped settles each
// reservation on its own goroutine while the next admission runs, as a
// gateway settles after answering.
func BenchmarkAdmitSettleOneCaller(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		fn := benchOps(b)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if err := fn(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("overlapped", func(b *testing.B) {
		l := threeRuleLimiter(b, openStore(b, redisstore.Options{URL: redisURL(b)}))
		req := sluice.Request{Identity: sluice.Identity{Key: "tenant-0"}, Max: sluice.Usage{InputTokens: 100, OutputTokens: 100}}
		used := sluice.Usage{InputTokens: 100, OutputTokens: 40}
		ctx := context.Background()
		var wg sync.WaitGroup
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			r, err := l.Admit(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				if err := r.Settle(ctx, used); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	})
}

// BenchmarkRoundTripFloor is what one caller's round trip to the server
// costs without the store: a PING, and a script that returns 1, through a
// rueidis client configured as Open configures it. An admission and a
// settlement are two round trips plus the scripts' own work.
func BenchmarkRoundTripFloor(b *testing.B) {
	co, err := rueidis.ParseURL(redisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	co.DisableCache = true
	co.ForceSingleClient = true
	c, err := rueidis.NewClient(co)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	script := rueidis.NewLuaScript("return 1")
	ctx := context.Background()
	b.Run("ping", func(b *testing.B) {
		for b.Loop() {
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("script", func(b *testing.B) {
		for b.Loop() {
			if err := script.Exec(ctx, c, nil, nil).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
