package respcache_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/respcache"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// run runs the same body against every store.
func run(t *testing.T, body func(t *testing.T, s gateway.CacheStore)) {
	t.Run("memory", func(t *testing.T) { body(t, respcache.NewMemory(respcache.MemoryOptions{})) })
	t.Run("redis", func(t *testing.T) { body(t, newRedis(t, rand.Text())) })
}

func newRedis(t *testing.T, prefix string) *respcache.Redis {
	url := testenv.RedisURL(t)
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return respcache.NewRedis(client, respcache.RedisOptions{Prefix: "sluice-test:" + prefix + ":"})
}

func TestStore_SetThenGet(t *testing.T) {
	run(t, func(t *testing.T, s gateway.CacheStore) {
		ctx := context.Background()
		if _, ok, err := s.Get(ctx, "absent"); ok || err != nil {
			t.Fatalf("an absent key: ok %v, err %v", ok, err)
		}
		value := bytes.Repeat([]byte(`{"answer":"the same every time"}`), 100)
		if err := s.Set(ctx, "k", value, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, ok, err := s.Get(ctx, "k")
		if !ok || err != nil || !bytes.Equal(got, value) {
			t.Fatalf("got %d bytes, ok %v, err %v; want the %d set", len(got), ok, err, len(value))
		}
	})
}

func TestRedis_TTLSetByRedisAndValuesCompressed(t *testing.T) {
	r := newRedis(t, rand.Text())
	ctx := context.Background()
	value := bytes.Repeat([]byte("a repetitive answer "), 500)
	if err := r.Set(ctx, "k", value, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	opt, _ := rueidis.ParseURL(testenv.RedisURL(t))
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	keys, err := client.Do(ctx, client.B().Keys().Pattern("sluice-test:*:k").Build()).AsStrSlice()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys: %v %v", keys, err)
	}
	for _, key := range keys {
		pttl, err := client.Do(ctx, client.B().Pttl().Key(key).Build()).AsInt64()
		if err != nil || pttl <= 0 || pttl > 90_000 {
			t.Fatalf("%s: pttl %d (%v), want (0, 90000]", key, pttl, err)
		}
	}
	stored, err := client.Do(ctx, client.B().Strlen().Key(keys[len(keys)-1]).Build()).AsInt64()
	if err != nil || stored >= int64(len(value))/10 {
		t.Fatalf("stored %d bytes for a %d-byte repetitive value (%v)", stored, len(value), err)
	}
}

func TestMemory_BoundedBySize(t *testing.T) {
	m := respcache.NewMemory(respcache.MemoryOptions{MaxBytes: 64 << 10})
	ctx := context.Background()
	value := make([]byte, 1<<10)
	for i := range 1000 {
		if err := m.Set(ctx, fmt.Sprint(i), value, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if held := m.Bytes(); held == 0 || held > 64<<10 {
		t.Fatalf("a 64 KiB cache holds %d bytes", held)
	}
}

func TestStore_PurgeByPattern(t *testing.T) {
	run(t, func(t *testing.T, s gateway.CacheStore) {
		ctx := context.Background()
		for _, k := range []string{"a1/m1/x", "a1/m2/y", "b2/m1/z"} {
			if err := s.Set(ctx, k, []byte(k), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		n, err := s.(gateway.CachePurger).Purge(ctx, "*/m1/*")
		if err != nil || n != 2 {
			t.Fatalf("purged %d (%v), want 2", n, err)
		}
		for k, want := range map[string]bool{"a1/m1/x": false, "a1/m2/y": true, "b2/m1/z": false} {
			if _, ok, err := s.Get(ctx, k); ok != want || err != nil {
				t.Errorf("%s held %v (%v), want %v", k, ok, err, want)
			}
		}
	})
}

func TestRedis_LockHeldByOneReplica(t *testing.T) {
	prefix := rand.Text()
	a, b := newRedis(t, prefix), newRedis(t, prefix)
	ctx := context.Background()
	unlock, taken, err := a.Lock(ctx, "k", time.Minute)
	if err != nil || !taken {
		t.Fatalf("first lock: taken %v, %v", taken, err)
	}
	if _, taken, err := b.Lock(ctx, "k", time.Minute); err != nil || taken {
		t.Fatalf("a held lock taken again: %v, %v", taken, err)
	}
	unlock()
	unlockB, taken, err := b.Lock(ctx, "k", time.Minute)
	if err != nil || !taken {
		t.Fatalf("a lock given back was not free: %v, %v", taken, err)
	}
	// The first holder's unlock, late, leaves the new holder's lock alone.
	unlock()
	if _, taken, _ := a.Lock(ctx, "k", time.Minute); taken {
		t.Fatal("a stale unlock freed another replica's lock")
	}
	unlockB()
}
