package memstore

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/internal/cacheline"
	"github.com/sluicehq/sluice/internal/inproc"
)

// TestStore_ArraysOwnTheirLines checks that what every admission reads (the
// store, its shards and their arrays of chunks) and the open admissions'
// shards start on a cache line and fill whole lines.
func TestStore_ArraysOwnTheirLines(t *testing.T) {
	s := New(Options{Shards: 8})
	a := &inproc.Admission{ID: 1, Deadline: 2e18, Subjects: []string{"k"},
		Charges: []inproc.Charge{{Kind: inproc.Rate, Rule: 1, Amount: 1, Limit: 10, Burst: 10, Window: 60e9}}}
	if !s.admitOne(1e18, a) {
		t.Fatal("admission refused")
	}
	owned := map[string]bool{
		"store":  cacheline.Owns(unsafe.Pointer(s), unsafe.Sizeof(storeLines{})),
		"shards": cacheline.OwnsArray(s.shards),
	}
	for i, sh := range s.shards {
		owned[fmt.Sprint("shard ", i)] = cacheline.Owns(unsafe.Pointer(sh), unsafe.Sizeof(*sh))
		owned[fmt.Sprint("shard ", i, " chunks")] = cacheline.OwnsArray(sh.chunks)
	}
	for i, o := range s.open {
		owned[fmt.Sprint("open ", i)] = cacheline.Owns(unsafe.Pointer(o), unsafe.Sizeof(*o))
	}
	for name, ok := range owned {
		if !ok {
			t.Errorf("%s: not whole cache lines of its own", name)
		}
	}
}
