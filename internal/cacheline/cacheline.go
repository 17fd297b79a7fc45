// Package cacheline allocates the memory that every admission reads so
// that no other object shares its cache lines.
//
// Go's allocator places a small object beside others of its size class,
// which may be anything: a structure another core writes on every
// iteration of its loop puts each read of a neighbour on the same line
// behind a transfer from that core's cache (about 70 ns on the 2-core
// machines measured, a quarter of an admission). An object whose size is a
// multiple of Size gets a slot of a size class that is one too, and slots
// start on line boundaries, so it shares no line with another object: the
// slices here are allocated that way. (An object of pointers larger than
// 512 bytes starts 8 bytes into its slot, after the allocator's header; it
// still has the slot's lines to itself, as every size class above 512
// bytes is a multiple of Size.) This is how the allocator works on 64-bit
// platforms, not a promise of the language; TestSlice_OwnsItsLines checks
// it. On 32-bit platforms, where the header starts above 128 bytes, the
// arrays are allocated the same way and may share their last line.
package cacheline

import "unsafe"

// Size is the cache line size assumed: 64 bytes on amd64 and most arm64.
const Size = 64

// Slice returns a slice of length n with room for at least c elements
// (n if c is smaller), whose array fills whole cache lines and shares them
// with no other object. T's size should divide Size (pointers, small
// integers); for other types Slice is make([]T, n, c).
func Slice[T any](n, c int) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	c = max(c, n, 1)
	if size == 0 || Size%size != 0 {
		return make([]T, n, c)
	}
	per := Size / size
	return make([]T, n, (c+per-1)/per*per)
}

// Clone returns a copy of s allocated as Slice allocates.
func Clone[T any](s []T) []T {
	return append(Slice[T](0, len(s)), s...)
}

// Owns reports whether the n bytes at p start on a cache line and fill
// whole lines, as an object allocated to have its lines to itself does;
// for tests.
func Owns(p unsafe.Pointer, n uintptr) bool {
	return uintptr(p)%Size == 0 && n%Size == 0
}

// OwnsArray is Owns for s's array, to its capacity.
func OwnsArray[T any](s []T) bool {
	var zero T
	return Owns(unsafe.Pointer(unsafe.SliceData(s)), uintptr(cap(s))*unsafe.Sizeof(zero))
}
