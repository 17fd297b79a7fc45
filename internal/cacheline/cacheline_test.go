package cacheline

import (
	"testing"
	"unsafe"
)

// TestSlice_OwnsItsLines checks what the package relies on: an array whose
// size is a multiple of Size starts on a line, so it shares none of its
// lines with another object.
func TestSlice_OwnsItsLines(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		// On 32-bit platforms an object of pointers above 128 bytes
		// carries the allocator's header, and its slot need not be
		// whole lines: what Slice promises is 64-bit platforms' layout.
		t.Skip("the layout checked is 64-bit platforms'")
	}
	check := func(name string, addr unsafe.Pointer, bytes int) {
		t.Helper()
		if name == "pointers" && bytes > 512 {
			// After the allocator's header, in a slot of whole lines.
			addr = unsafe.Add(addr, -8)
		}
		if !Owns(addr, uintptr(bytes)) {
			t.Errorf("%s: array of %d bytes at %p, not whole %d-byte lines of its own", name, bytes, addr, Size)
		}
	}
	for _, n := range []int{0, 1, 3, 8, 9, 40, 300} {
		// Interleave tiny allocations, which would otherwise be packed
		// beside the arrays.
		sink = append(sink, new(byte), new([3]byte))
		p := Slice[*int](n, 0)
		check("pointers", unsafe.Pointer(unsafe.SliceData(p[:cap(p)])), cap(p)*int(unsafe.Sizeof(p[0])))
		u := Slice[uint16](n, n+1)
		check("uint16", unsafe.Pointer(unsafe.SliceData(u[:cap(u)])), cap(u)*2)
		b := Clone(make([]byte, n))
		check("bytes", unsafe.Pointer(unsafe.SliceData(b[:cap(b)])), cap(b))
		if len(p) != n || len(u) != n || len(b) != n || cap(u) < n+1 {
			t.Errorf("n=%d: lengths %d %d %d, uint16 capacity %d", n, len(p), len(u), len(b), cap(u))
		}
	}
}

var sink []any

func TestSlice_OtherSizesAsMake(t *testing.T) {
	s := Slice[[3]byte](2, 5)
	if len(s) != 2 || cap(s) != 5 {
		t.Errorf("len %d cap %d, want 2 and 5", len(s), cap(s))
	}
}
