package respcache

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/gateway"
)

// Redis keeps entries in Redis, shared by every replica: each value
// gzip-compressed under its own key, with its time to live set by Redis
// (SET PX), so that an expired entry is gone for every replica at once.
// It works with a standalone server and with a Redis Cluster (each entry
// is one key). It is safe for concurrent use.
type Redis struct {
	client rueidis.Client
	prefix string
}

var _ gateway.CacheStore = (*Redis)(nil)

// RedisOptions configure a Redis store.
type RedisOptions struct {
	// Prefix starts every key ("sluice:cache:" by default).
	Prefix string
}

// NewRedis returns a store over client, which the caller keeps and
// closes (the counter store's, say: redisstore.Store.Client).
func NewRedis(client rueidis.Client, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "sluice:cache:"
	}
	return &Redis{client: client, prefix: opts.Prefix}
}

// Get returns the value kept under key.
func (r *Redis) Get(ctx context.Context, key string) ([]byte, bool, error) {
	z, err := r.client.Do(ctx, r.client.B().Get().Key(r.prefix+key).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("respcache: get: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, false, fmt.Errorf("respcache: get: %w", err)
	}
	v, err := io.ReadAll(zr)
	if err != nil {
		return nil, false, fmt.Errorf("respcache: get: %w", err)
	}
	return v, true, nil
}

// Set keeps value under key for ttl (rounded up to a millisecond).
func (r *Redis) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
	if _, err := zw.Write(value); err != nil {
		return fmt.Errorf("respcache: set: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("respcache: set: %w", err)
	}
	ms := max(1, (ttl+time.Millisecond-1)/time.Millisecond)
	cmd := r.client.B().Set().Key(r.prefix + key).Value(rueidis.BinaryString(z.Bytes())).PxMilliseconds(int64(ms)).Build()
	if err := r.client.Do(ctx, cmd).Error(); err != nil {
		return fmt.Errorf("respcache: set: %w", err)
	}
	return nil
}

var _ gateway.CachePurger = (*Redis)(nil)

// Purge drops the entries whose keys match match (SCAN MATCH on every
// node, then UNLINK).
func (r *Redis) Purge(ctx context.Context, match string) (int, error) {
	nodes := []rueidis.Client{r.client}
	if r.client.Mode() == rueidis.ClientModeCluster {
		nodes = slices.Collect(maps.Values(r.client.Nodes()))
	}
	n := 0
	for _, node := range nodes {
		for cursor := uint64(0); ; {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(r.prefix+match).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return n, fmt.Errorf("respcache: purge: %w", err)
			}
			for _, k := range e.Elements {
				gone, err := r.client.Do(ctx, r.client.B().Unlink().Key(k).Build()).AsInt64()
				if err != nil {
					return n, fmt.Errorf("respcache: purge: %w", err)
				}
				n += int(gone)
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return n, nil
}

var _ gateway.CacheLocker = (*Redis)(nil)

// unlockScript deletes a lock only while it holds the caller's token: a
// lock that expired and was taken by another replica is left alone.
var unlockScript = rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// Lock takes key's lock for ttl (SET NX PX with a token of its own) unless
// another replica holds it.
func (r *Redis) Lock(ctx context.Context, key string, ttl time.Duration) (func(), bool, error) {
	lock, token := r.prefix+"lock:"+key, rand.Text()
	ms := max(1, (ttl+time.Millisecond-1)/time.Millisecond)
	err := r.client.Do(ctx, r.client.B().Set().Key(lock).Value(token).Nx().PxMilliseconds(int64(ms)).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return nil, false, nil // held by another
	}
	if err != nil {
		return nil, false, fmt.Errorf("respcache: lock: %w", err)
	}
	unlock := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		// A lock not given back ends at its TTL.
		_ = unlockScript.Exec(ctx, r.client, []string{lock}, []string{token}).Error()
	}
	return unlock, true, nil
}
