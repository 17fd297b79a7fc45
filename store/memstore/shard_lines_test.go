package memstore

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/internal/cacheline"
	"github.com/sluicehq/sluice/internal/inproc"
)

// TestStore_HotStructuresFillWholeLines checks the sizes that keep what
// every admission touches off other objects' cache lines.
func TestStore_HotStructuresFillWholeLines(t *testing.T) {
	for name, size := range map[string]uintptr{
		"paddedShard": unsafe.Sizeof(paddedShard{}),
		"storeLines":  unsafe.Sizeof(storeLines{}),
		"openShard":   unsafe.Sizeof(openShard{}),
	} {
		if size%cacheline.Size != 0 {
			t.Errorf("%s: %d bytes, not a multiple of %d", name, size, cacheline.Size)
		}
	}
}

// TestStore_ArraysOwnTheirLines checks that the store, its array of shards
// and a shard's array of chunks start on a cache line and fill whole lines.
func TestStore_ArraysOwnTheirLines(t *testing.T) {
	s := New(Options{Shards: 8})
	a := &inproc.Admission{ID: 1, Deadline: 2e18, Subjects: []string{"k"},
		Charges: []inproc.Charge{{Kind: inproc.Rate, Rule: 1, Amount: 1, Limit: 10, Burst: 10, Window: 60e9}}}
	if !s.admitOne(1e18, a) {
		t.Fatal("admission refused")
	}
	owns := func(name string, addr unsafe.Pointer, bytes uintptr) {
		t.Helper()
		if uintptr(addr)%cacheline.Size != 0 || bytes%cacheline.Size != 0 {
			t.Errorf("%s: %d bytes at %p, not whole lines of its own", name, bytes, addr)
		}
	}
	owns("store", unsafe.Pointer(s), unsafe.Sizeof(storeLines{}))
	owns("shards", unsafe.Pointer(unsafe.SliceData(s.shards)), uintptr(cap(s.shards))*unsafe.Sizeof(s.shards[0]))
	for i, sh := range s.shards {
		owns(fmt.Sprint("shard ", i), unsafe.Pointer(sh), unsafe.Sizeof(*sh))
		owns(fmt.Sprint("shard ", i, " chunks"), unsafe.Pointer(unsafe.SliceData(sh.chunks)), uintptr(cap(sh.chunks))*unsafe.Sizeof(sh.chunks[0]))
	}
	for i, o := range s.open {
		owns(fmt.Sprint("open ", i), unsafe.Pointer(o), unsafe.Sizeof(*o))
	}
}
