package sluice

import (
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/internal/cacheline"
)

// TestHotStructuresFillWholeLines checks the sizes that keep what every
// admission reads off other objects' cache lines.
func TestHotStructuresFillWholeLines(t *testing.T) {
	for name, size := range map[string]uintptr{
		"policyLines": unsafe.Sizeof(policyLines{}),
		"realClock":   unsafe.Sizeof(realClock{}),
		"anchor":      unsafe.Sizeof(anchor{}),
	} {
		if size%cacheline.Size != 0 {
			t.Errorf("%s: %d bytes, not a multiple of %d", name, size, cacheline.Size)
		}
	}
}
