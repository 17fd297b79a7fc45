// Package respcache holds the stores of the gateway's response cache
// (gateway.CacheStore): one process's memory, bounded, and Redis, shared by
// every replica.
package respcache

import (
	"context"
	"fmt"
	"path"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/sluicehq/sluice/gateway"
)

// DefaultMaxBytes bounds a Memory store when MemoryOptions.MaxBytes is 0:
// 64 MiB of keys and values.
const DefaultMaxBytes = 64 << 20

// MemoryOptions configure a Memory store. The zero value is useful.
type MemoryOptions struct {
	// MaxBytes bounds the keys and values held; past it the entries least
	// likely to be read again are evicted. 0 means DefaultMaxBytes.
	MaxBytes uint64
}

// Memory keeps entries in the process's memory, bounded by size (otter's
// W-TinyLFU eviction) and by each entry's time to live. It is safe for
// concurrent use. A restart empties it: the cache is cold, never wrong.
type Memory struct {
	c *otter.Cache[string, entry]
}

var _ gateway.CacheStore = (*Memory)(nil)

type entry struct {
	value []byte
	ttl   time.Duration
}

// NewMemory returns an empty Memory store.
func NewMemory(opts MemoryOptions) *Memory {
	maxBytes := opts.MaxBytes
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Memory{c: otter.Must(&otter.Options[string, entry]{
		MaximumWeight: maxBytes,
		Weigher: func(k string, e entry) uint32 {
			return uint32(min(len(k)+len(e.value), 1<<32-1))
		},
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, entry]) time.Duration {
			return e.Value.ttl
		}),
	})}
}

// Get returns the value kept under key.
func (m *Memory) Get(_ context.Context, key string) ([]byte, bool, error) {
	e, ok := m.c.GetIfPresent(key)
	return e.value, ok, nil
}

// Set keeps value under key for ttl.
func (m *Memory) Set(_ context.Context, key string, value []byte, ttl time.Duration) error {
	m.c.Set(key, entry{value: value, ttl: ttl})
	return nil
}

// Bytes returns the size of the keys and values held, once any pending
// eviction is done.
func (m *Memory) Bytes() uint64 {
	m.c.CleanUp()
	return m.c.WeightedSize()
}

var _ gateway.CachePurger = (*Memory)(nil)

// Purge drops the entries whose keys match match (path.Match).
func (m *Memory) Purge(_ context.Context, match string) (int, error) {
	if _, err := path.Match(match, ""); err != nil {
		return 0, fmt.Errorf("respcache: purge: %w", err)
	}
	var keys []string
	for k := range m.c.Keys() {
		if ok, _ := path.Match(match, k); ok {
			keys = append(keys, k)
		}
	}
	n := 0
	for _, k := range keys {
		if _, gone := m.c.Invalidate(k); gone {
			n++
		}
	}
	return n, nil
}
