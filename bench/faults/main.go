// Command faults is the published proof of issue 16's fault injection:
// gateways (`sluice serve`, built from this module) reach their counter
// store, Redis or PostgreSQL, through Shopify's toxiproxy, run in this
// process on free loopback ports, and every scenario puts one fault between
// them under load: latency above the store's timeout, a stall (connections
// held, no byte through), resets in the middle of a call, a bandwidth
// limit, and one replica of three cut off from Redis while the others go
// on. For each it measures and checks: no overshoot of a hard budget or of
// a concurrency cap, no phantom holds (the cap free and the budgets
// charged exactly what was served once the load ends), the ledger equal to
// the store, the time to the first 503 and the time to recover. It prints
// a Markdown table, and exits 1 when a promise is broken. The same
// scenarios run in CI as TestFaults.
//
// The catalog (keys, ledger) is a database created on the PostgreSQL
// server for the run and dropped after it, reached directly; the Redis
// keys of the run's workspaces are deleted at the end.
//
//	go run -C bench ./faults                # every scenario, about 2 minutes
//	go run -C bench ./faults -only postgres # the scenarios whose name contains it
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

func main() {
	var o options
	flag.StringVar(&o.redis, "redis", "redis://127.0.0.1:6379/0", "Redis server the proxies forward to")
	flag.StringVar(&o.postgres, "postgres", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"PostgreSQL server where the run's database is created (and dropped)")
	flag.DurationVar(&o.fault, "fault", 3*time.Second, "how long each fault lasts")
	flag.StringVar(&o.only, "only", "", "run only the scenarios whose name contains this")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := runAll(ctx, o, proc.Logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	command := "go run -C bench ./faults"
	if len(os.Args) > 1 {
		command += " " + strings.Join(os.Args[1:], " ")
	}
	fmt.Print(markdown(results, o.fault, command))
	for _, r := range results {
		if len(r.broken()) > 0 {
			os.Exit(1)
		}
	}
}

// runAll runs the scenarios o selects, in turn.
func runAll(ctx context.Context, o options, logf func(string, ...any)) ([]*result, error) {
	s, err := newSuite(ctx, o, logf)
	if err != nil {
		return nil, err
	}
	defer s.close()
	var results []*result
	for _, sc := range scenarios() {
		if !strings.Contains(sc.name, o.only) {
			continue
		}
		r, err := s.run(ctx, sc, o.fault)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.name, err)
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("no scenario's name contains %q", o.only)
	}
	return results, nil
}
