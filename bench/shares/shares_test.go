package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestShares runs the command's load on one replica over SQLite and on
// three sharing Redis, its phases shorter and its calls longer, and fails on
// every promise broken: a class's share off by more than 5 points under
// contention, the cap left idle while a class asks, the cap exceeded. The
// cap must be 70 % busy rather than the command's 85 %: CI runs this beside
// the other packages' tests, the harness under the race detector, and its
// clients' next tries come late; without borrowing a class alone would use
// 17 % to 50 %.
func TestShares(t *testing.T) {
	redis := testenv.RedisURL(t)
	for _, replicas := range []int{1, 3} {
		t.Run(map[int]string{1: "sqlite", 3: "redis_3_replicas"}[replicas], func(t *testing.T) {
			o := defaultOptions()
			o.replicas, o.redis, o.phase, o.hold, o.busy = replicas, redis, 6*time.Second, 500*time.Millisecond, 0.7
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			r, err := run(ctx, o, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + r.markdown("go test -C bench -run TestShares ./shares"))
			for _, b := range r.broken() {
				t.Error(b)
			}
		})
	}
}
