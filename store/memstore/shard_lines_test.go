package memstore

import (
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/internal/cacheline"
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
