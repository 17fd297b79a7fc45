package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestMain lets the replica tests re-run this binary as the processes they
// start, and ends the package's output with the tests testenv skipped.
func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	// The parallel tests wait on stalled servers, delaying proxies, busy
	// scripts and child processes.
	testenv.WaitingTests(8)
	code := testenv.Run(m)
	stopCluster()
	os.Exit(code)
}

// redisURL is the package's one gate for tests that need Redis:
// testenv.RedisURL.
func redisURL(t testing.TB) string {
	t.Helper()
	return testenv.RedisURL(t)
}

var prefixes atomic.Int64

// freshPrefix returns a key prefix no other test uses.
func freshPrefix() string {
	return fmt.Sprintf("sluicetest-%d-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9, prefixes.Add(1))
}

// testTimeout bounds store calls in tests that are not about timeouts: the
// race detector and a busy CI machine can make a round trip slow.
const testTimeout = 5 * time.Second

// openStore opens a store on url with a fresh prefix and deletes its keys
// when the test ends. A zero Timeout is testTimeout.
func openStore(t testing.TB, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = freshPrefix()
	}
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	s, err := redisstore.Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		deleteKeys(t, opts.URL, opts.Prefix)
		_ = s.Close()
	})
	return s
}

// deleteKeys removes every key under prefix from a standalone server.
func deleteKeys(t testing.TB, url, prefix string) {
	co, err := rueidis.ParseURL(url)
	if err != nil {
		return
	}
	co.ForceSingleClient, co.DisableCache = true, true
	c, err := rueidis.NewClient(co)
	if err != nil {
		return
	}
	defer c.Close()
	ctx := context.Background()
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return
		}
		if len(e.Elements) > 0 {
			c.Do(ctx, c.B().Unlink().Key(e.Elements...).Build())
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}

func TestConformance(t *testing.T) {
	url := redisURL(t)
	storetest.Run(t, func(t *testing.T) sluice.Store {
		return openStore(t, redisstore.Options{URL: url, PinTime: true})
	})
}

// admitBatch is s.Admit of b at now, with room for the results, which it
// drops.
func admitBatch(ctx context.Context, s sluice.Store, now time.Time, b *sluice.Batch) (bool, error) {
	return s.Admit(ctx, now, *b, make([]sluice.ChargeResult, len(b.Charges)))
}
