package pgstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
)

// benchCallers is the number of concurrent callers of every benchmark here.
const benchCallers = 32

// benchConns is the pool size of the store and of the peer alike.
var benchConns = int32(4 * runtime.GOMAXPROCS(0))

// benchRules are the three rules of the request benchmarked: requests and
// tokens per minute and a daily token budget, on the subjects key and
// workspace, high enough never to refuse.
var benchRules = []sluice.Rule{
	{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1 << 40, Window: time.Minute},
	{Name: "tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: 1 << 50, Window: time.Minute},
	{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1 << 60, Period: sluice.PeriodDay},
}

// parallel runs op from benchCallers goroutines, each with its own caller
// number, and reports operations per second.
func parallel(b *testing.B, op func(caller int) error) {
	var callers atomic.Int64
	b.SetParallelism(max(1, benchCallers/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		caller := int(callers.Add(1))
		for pb.Next() {
			if err := op(caller); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkAdmitSettle measures Limiter.Admit then Settle of the three-rule
// request from 32 callers, each on its own subject (distinct) or all on one
// (hot), beside the peer: a plain one-row UPDATE through pgx from 32 callers
// on distinct rows, in autocommit (one round trip, like our calls) and as an
// explicit BEGIN/UPDATE/COMMIT transaction. Store and peer use pools of the
// same size on the same server in the same run.
func BenchmarkAdmitSettle(b *testing.B) {
	schema := testSchema(b)
	s := openStore(b, schema, pgstore.Options{MaxConns: benchConns})
	l, err := sluice.New(sluice.Options{Store: s, Rules: benchRules})
	if err != nil {
		b.Fatal(err)
	}
	peer := benchPeerPool(b, schema)
	ctx := context.Background()
	admitSettle := func(subject string) error {
		r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: subject, Key: subject},
			Max: sluice.Usage{InputTokens: 100, OutputTokens: 100}})
		if err != nil {
			return err
		}
		return r.Settle(ctx, sluice.Usage{InputTokens: 100, OutputTokens: 37})
	}
	b.Run("store=pgstore/subjects=distinct", func(b *testing.B) {
		parallel(b, func(caller int) error { return admitSettle(fmt.Sprintf("subject-%d", caller)) })
	})
	b.Run("store=pgstore/subjects=hot", func(b *testing.B) {
		parallel(b, func(int) error { return admitSettle("hot") })
	})
	b.Run("peer=update/rows=distinct", func(b *testing.B) {
		parallel(b, func(caller int) error {
			_, err := peer.Exec(ctx, "UPDATE bench_rows SET n = n + 1 WHERE id = $1", caller)
			return err
		})
	})
	b.Run("peer=update-tx/rows=distinct", func(b *testing.B) {
		parallel(b, func(caller int) error {
			return pgx.BeginFunc(ctx, peer, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "UPDATE bench_rows SET n = n + 1 WHERE id = $1", caller)
				return err
			})
		})
	})
}

// benchPeerPool returns a pool of benchConns on schema holding bench_rows,
// one row per caller.
func benchPeerPool(b *testing.B, schema string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(postgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = benchConns
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE bench_rows (id integer PRIMARY KEY, n bigint NOT NULL);
INSERT INTO bench_rows SELECT i, 0 FROM generate_series(0, 1024) i`); err != nil {
		b.Fatal(err)
	}
	return pool
}
