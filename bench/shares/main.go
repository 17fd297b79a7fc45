// Command shares is the proof of issue 20's priority classes through the
// gateway: N replicas of `sluice serve` (built from this module) share one
// concurrency cap with three classes, interactive, standard and batch, each
// class's clients calling as fast as the cap lets them (a refused call is
// tried again 10 to 30 ms later). The mock provider, in this process, holds
// every call a fixed time and counts the calls of each class it is
// answering, sampled every 50 ms. The load runs in phases (all three
// classes, then interactive idle, batch alone, interactive back); in each,
// after its first two seconds (a demand marker's longest life), every
// class asking must have its share of the calls in flight (within 5 points
// of it when all three ask, at least that otherwise) and the classes asking
// must keep the cap busy (85 %: a freed place waits for a client's next
// try). The cap is never exceeded. It prints a Markdown table, writes the
// samples as CSV and, with -png, draws them.
//
// One replica runs on the embedded SQLite store; more share a Redis
// server (-redis), the run's keys deleted at the end. Identities are JWTs
// signed by a key made for the run, their class in a claim.
//
//	go run -C bench ./shares                       # 3 replicas on Redis
//	go run -C bench ./shares -replicas 1           # one replica on SQLite
//	go run -C bench ./shares -png ../docs/shares.png # and draw the samples
//
// bench is its own module (bench/go.mod), so plotting stays out of
// sluice's go.mod: run it from bench/ (go run -C bench), and relative
// paths in flags are read from there.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

func main() {
	o := defaultOptions()
	flag.IntVar(&o.replicas, "replicas", 3, "gateway replicas: 1 runs on SQLite, more share Redis")
	flag.StringVar(&o.redis, "redis", "redis://127.0.0.1:6379/0", "the Redis server the replicas share")
	flag.DurationVar(&o.phase, "phase", o.phase, "length of each phase of the load")
	flag.DurationVar(&o.hold, "hold", o.hold, "how long the mock provider holds each call")
	flag.StringVar(&o.csv, "csv", "", "write the samples to this CSV file")
	flag.StringVar(&o.png, "png", "", "draw the samples into this PNG file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := run(ctx, o, proc.Logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shares:", err)
		os.Exit(1)
	}
	if o.csv != "" {
		if err := r.writeCSV(o.csv); err != nil {
			fmt.Fprintln(os.Stderr, "shares:", err)
			os.Exit(1)
		}
	}
	if o.png != "" {
		if err := r.writePNG(o.png); err != nil {
			fmt.Fprintln(os.Stderr, "shares:", err)
			os.Exit(1)
		}
	}
	command := "go run -C bench ./shares"
	if len(os.Args) > 1 {
		command += " " + strings.Join(os.Args[1:], " ")
	}
	fmt.Print(r.markdown(command))
	if len(r.broken()) > 0 {
		os.Exit(1)
	}
}
