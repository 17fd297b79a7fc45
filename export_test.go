package sluice

// SameState reports whether two reservations were given the same pooled
// state, for the tests of state reuse.
func SameState(a, b *Reservation) bool { return a.s == b.s }
