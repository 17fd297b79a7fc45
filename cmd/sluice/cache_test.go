package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway/respcache"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestServe_WiresTheResponseCache: a model's cache.ttl reaches the gateway;
// the cache is in Redis with a Redis store, in memory with any other, and
// absent when no model keeps answers.
func TestServe_WiresTheResponseCache(t *testing.T) {
	cfg, err := config.Parse([]byte(`
providers:
  - {name: mock, kind: mock}
models:
  - {name: kept, provider: mock, max_output_tokens: 100, cache: {ttl: 10m}}
  - {name: plain, provider: mock, max_output_tokens: 100}
cache: {max_bytes: 1048576}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	models, err := modelsOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if models[0].CacheTTL != 10*time.Minute || models[1].CacheTTL != 0 {
		t.Fatalf("cache TTLs %v and %v, want 10m and none", models[0].CacheTTL, models[1].CacheTTL)
	}
	log := slog.New(slog.DiscardHandler)
	if _, ok := cacheOf(cfg, memstore.New(memstore.Options{}), log).(*respcache.Memory); !ok {
		t.Fatal("with a memory store the cache is not in memory")
	}
	rs, err := redisstore.Open(context.Background(), redisstore.Options{URL: testenv.RedisURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if _, ok := cacheOf(cfg, rs, log).(*respcache.Redis); !ok {
		t.Fatal("with a Redis store the cache is not in Redis")
	}
	cfg.Models[0].Cache = nil
	if c := cacheOf(cfg, rs, log); c != nil {
		t.Fatalf("no model keeps answers, yet the cache is %T", c)
	}
}
