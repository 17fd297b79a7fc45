package main

import (
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/mockprovider"
)

// mock runs the mock provider alone, for tests and benchmarks.
func mock(args []string) error {
	fs := flag.NewFlagSet("mock", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9090", "address to listen on")
	latency := fs.Duration("latency", 0, "wait before the first byte of every answer")
	interval := fs.Duration("chunk-interval", 0, "wait between streamed chunks")
	perChunk := fs.Int("tokens-per-chunk", 1, "tokens in each streamed chunk")
	rateLimit := fs.Int64("rate-limit-requests", 0, "the mock's own rate limit: model calls per --rate-limit-window, told in the providers' rate-limit headers (0: none)")
	rateWindow := fs.Duration("rate-limit-window", time.Minute, "the window of --rate-limit-requests")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 10 * time.Second,
		Handler: mockprovider.New(mockprovider.Options{Latency: *latency, ChunkInterval: *interval, TokensPerChunk: *perChunk,
			RateLimitRequests: *rateLimit, RateLimitWindow: *rateWindow})}
	fmt.Printf("sluice mock: OpenAI and Anthropic formats on http://%s (models mock-small, mock-large)\n", *listen)
	return srv.ListenAndServe()
}
