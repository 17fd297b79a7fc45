package memstore

import (
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/internal/inproc"
)

// A slot is one cache line, and every chunk starts on one, so that no
// counter straddles two lines.
func TestSlotIsOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(slot{}); n != 64 {
		t.Fatalf("slot is %d bytes, want 64", n)
	}
	var sh shard
	sh.init()
	for i := range 4 << chunkBits {
		sh.add(subjectKey{a: uint64(i), b: uint64(i)}, noSlot, 1, 0)
	}
	for j, c := range sh.chunks {
		if p := uintptr(unsafe.Pointer(c)); p%64 != 0 {
			t.Fatalf("chunk %d at %#x: not on a cache line", j, p)
		}
	}
}

// A budget's state lies on a rate bucket's three words, at the start of
// the counter.
func TestBudgetSharesRateWords(t *testing.T) {
	var c counter
	if unsafe.Offsetof(c.tat) != 0 || unsafe.Offsetof(c.frac) != 8 || unsafe.Offsetof(c.drawnAt) != 16 || unsafe.Sizeof(budgetState{}) != 24 {
		t.Fatal("counter does not start with tat, frac, drawnAt")
	}
	b := c.budget()
	b.used, b.reserved, b.end = 1, 2, 3
	if c.tat != 1 || c.frac != 2 || c.drawnAt != 3 {
		t.Fatalf("budget state not in the rate words: %+v", c)
	}
}

// What an admission touches of its shard lies in the shard's first cache
// line, and shards start on one.
func TestShardHotFieldsInOneLine(t *testing.T) {
	var sh shard
	if end := unsafe.Offsetof(sh.chunks) + 16; end > 64 || unsafe.Offsetof(sh.ops) >= 64 || unsafe.Offsetof(sh.subjects)+unsafe.Sizeof(sh.subjects) > 64 {
		t.Fatalf("hot fields of shard past its first cache line: chunks data and len end at %d", end)
	}
	if unsafe.Sizeof(paddedShard{})%64 != 0 {
		t.Fatalf("paddedShard is %d bytes", unsafe.Sizeof(paddedShard{}))
	}
	s := New(Options{})
	for i := range s.shards {
		if p := uintptr(unsafe.Pointer(s.shards[i])); p%64 != 0 {
			t.Fatalf("shard %d at %#x: not on a cache line", i, p)
		}
	}
}

// A counter takes the kind of its first charge; a charge of no known kind
// leaves it alone, and one of another kind starts it afresh, out-of-line
// leases given back.
func TestClaimKind(t *testing.T) {
	var sh shard
	sh.init()
	c := &sh.at(sh.add(subjectKey{}, noSlot, 1, 0)).counter
	sh.claim(c, inproc.Rate)
	c.tat, c.frac, c.drawnAt = 5, 6, 7
	sh.claim(c, 0)
	sh.claim(c, inproc.Rate)
	if c.kind != inproc.Rate || c.tat != 5 || c.frac != 6 || c.drawnAt != 7 {
		t.Fatalf("claimed again as its own kind or none: %+v", *c)
	}
	sh.claim(c, inproc.Concurrency)
	if c.kind != inproc.Concurrency || c.tat != 0 || c.frac != 0 || c.drawnAt != 0 {
		t.Fatalf("claimed as another kind: %+v", *c)
	}
	sh.addLease(c, lease{id: 1, expiry: 10})
	sh.addLease(c, lease{id: 2, expiry: 10})
	sh.claim(c, inproc.Budget)
	if c.inl || c.lease != 0 || len(sh.freeLeases) != 1 || *c.budget() != (budgetState{}) {
		t.Fatalf("leases kept past a change of kind: %+v, free %v", *c, sh.freeLeases)
	}
}
