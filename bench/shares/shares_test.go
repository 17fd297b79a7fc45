package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestShares runs the command's load, its phases shorter, on one replica
// over SQLite and on three sharing Redis, and fails on every promise
// broken: a class's share off by more than 5 points under contention, the
// cap left idle while a class asks, the cap exceeded.
func TestShares(t *testing.T) {
	redis := testenv.RedisURL(t)
	for _, replicas := range []int{1, 3} {
		t.Run(map[int]string{1: "sqlite", 3: "redis_3_replicas"}[replicas], func(t *testing.T) {
			o := defaultOptions()
			o.replicas, o.redis, o.phase = replicas, redis, 4*time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			r, err := run(ctx, o, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + r.markdown("go test -run TestShares ./bench/shares"))
			for _, b := range r.broken() {
				t.Error(b)
			}
		})
	}
}
