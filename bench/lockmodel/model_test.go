// Package lockmodel is a model, not Sluice code: what a lock in each
// subject's own counter line would buy over memstore's lock per shard, for
// 10,000 subjects admitted from two cores at once (the engine's parallel
// benchmark). Both variants find a subject's three 64-byte slots through an
// open-addressing table keyed by a 128-bit hash, placed at random as a hash
// table places them, and per op update the three slots and then settle them,
// taking their lock twice:
//
//   - shardlock: 64 shards, each a mutex, a table and its subjects' slots,
//     as memstore is;
//   - subjectlock: one table read without a lock (built once, never written:
//     the model leaves out what a concurrent table would cost) and a spin
//     lock in each subject's first slot, so that the lock's line is the
//     first counter's.
//
// Each at serial (one subject, one goroutine), parallel (RunParallel over
// the 10,000 subjects) and unshared (each goroutine a store of its own):
//
//	go test -run '^$' -bench Model -cpu 2 -count 3 ./bench/lockmodel/
package lockmodel

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const nSubjects = 10000

// slot is 64 bytes, as memstore's: the fields stand for its counter.
type slot struct {
	rule, period uint64
	tat, frac    int64
	drawn, touch int64
	lock         atomic.Int32 // the subject's lock, in its first slot (subjectlock)
	kind         uint32
	next, gen    uint32
}

type entry struct {
	a, b uint64
	ref  uint32
}

type table struct {
	entries []entry
	mask    uint64
}

func (t *table) get(a, b uint64) uint32 {
	for i := b & t.mask; ; i = (i + 1) & t.mask {
		e := &t.entries[i]
		if e.ref == 0 {
			return ^uint32(0)
		}
		if e.a == a && e.b == b {
			return e.ref - 1
		}
	}
}

func (t *table) set(a, b uint64, ref uint32) {
	for i := b & t.mask; ; i = (i + 1) & t.mask {
		e := &t.entries[i]
		if e.ref == 0 {
			*e = entry{a, b, ref + 1}
			return
		}
	}
}

func newTable(n int) table {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	size *= 2
	return table{entries: make([]entry, size), mask: uint64(size - 1)}
}

var seedA, seedB = maphash.MakeSeed(), maphash.MakeSeed()

func keyOf(s string) (uint64, uint64) { return maphash.String(seedA, s), maphash.String(seedB, s) }

// work is the counter update of one charge: a bucket's check and draw.
func work(sl *slot, now int64) {
	if sl.tat < now {
		sl.tat = now
	}
	sl.tat += 1000
	sl.frac ^= now
	sl.touch = now
}

type shard struct {
	mu    sync.Mutex
	t     table
	slots []slot
	_     [64]byte
}

// shardStore: memstore's shape. 64 shards, each a lock, a table, 3 slots a subject.
type shardStore struct{ shards [64]*shard }

func newShardStore(keys []string) *shardStore {
	s := &shardStore{}
	per := make([][]string, 64)
	for _, k := range keys {
		a, _ := keyOf(k)
		per[a%64] = append(per[a%64], k)
	}
	for i := range s.shards {
		sh := &shard{t: newTable(len(per[i]) + 1), slots: make([]slot, 3*len(per[i])+3)}
		perm := rand.New(rand.NewPCG(uint64(i), 2)).Perm(len(per[i]))
		for j, k := range per[i] {
			a, b := keyOf(k)
			sh.t.set(a, b, uint32(3*perm[j]))
		}
		s.shards[i] = sh
	}
	return s
}

func (s *shardStore) op(key string, now int64) {
	a, b := keyOf(key)
	sh := s.shards[a%64]
	sh.mu.Lock()
	h := sh.t.get(a, b)
	for r := uint32(0); r < 3; r++ {
		work(&sh.slots[h+r], now)
	}
	sh.mu.Unlock()
	// settle
	sh.mu.Lock()
	for r := uint32(0); r < 3; r++ {
		sh.slots[h+r].frac++
	}
	sh.mu.Unlock()
}

// subjectStore: a table read without a lock (built once, never written
// here), and a spin lock in each subject's first slot.
type subjectStore struct {
	t     table
	slots []slot
}

func newSubjectStore(keys []string) *subjectStore {
	s := &subjectStore{t: newTable(len(keys)), slots: make([]slot, 3*len(keys)+3)}
	perm := rand.New(rand.NewPCG(1, 2)).Perm(len(keys))
	for j, k := range keys {
		a, b := keyOf(k)
		s.t.set(a, b, uint32(3*perm[j]))
	}
	return s
}

func lock(l *atomic.Int32) {
	for !l.CompareAndSwap(0, 1) {
		runtime.Gosched()
	}
}

func (s *subjectStore) op(key string, now int64) {
	a, b := keyOf(key)
	h := s.t.get(a, b)
	l := &s.slots[h].lock
	lock(l)
	for r := uint32(0); r < 3; r++ {
		work(&s.slots[h+r], now)
	}
	l.Store(0)
	lock(l)
	for r := uint32(0); r < 3; r++ {
		s.slots[h+r].frac++
	}
	l.Store(0)
}

type store interface{ op(string, int64) }

func keys() []string {
	k := make([]string, nSubjects)
	for i := range k {
		k[i] = fmt.Sprintf("key-%06d", i)
	}
	return k
}

func bench(b *testing.B, mk func([]string) store, parallel, own bool) {
	ks := keys()
	st := mk(ks)
	if !parallel {
		now := time.Now().UnixNano()
		for b.Loop() {
			st.op("key-000001", now)
		}
		return
	}
	// With own, each goroutine a store of its own, made before timing.
	stores := make([]store, runtime.GOMAXPROCS(0)*8)
	for i := range stores {
		stores[i] = st
		if own {
			stores[i] = mk(ks)
		}
	}
	var seq atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := seq.Add(1)
		s := stores[int(g-1)%len(stores)]
		i := int(g*7919) % len(ks)
		now := time.Now().UnixNano()
		for pb.Next() {
			s.op(ks[i], now)
			if i++; i == len(ks) {
				i = 0
			}
		}
	})
}

func BenchmarkModel(b *testing.B) {
	for _, v := range []struct {
		name string
		mk   func([]string) store
	}{
		{"shardlock", func(k []string) store { return newShardStore(k) }},
		{"subjectlock", func(k []string) store { return newSubjectStore(k) }},
	} {
		b.Run(v.name+"/serial", func(b *testing.B) { bench(b, v.mk, false, false) })
		b.Run(v.name+"/parallel", func(b *testing.B) { bench(b, v.mk, true, false) })
		b.Run(v.name+"/unshared", func(b *testing.B) { bench(b, v.mk, true, true) })
	}
}
