package memstore

import (
	"math/rand/v2"
	"testing"
)

// The table agrees with a map through random sets and deletions, with
// keys that crowd the last few entries so that probe runs wrap and
// deletions move entries back across the table's end.
func TestTable_AgreesWithMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tb table
	model := map[subjectKey]uint32{}
	key := func() subjectKey {
		// Low bits from a small set at the top of any table's range:
		// long probe runs that wrap to the table's start; high bits
		// apart.
		return subjectKey{a: uint64(rng.IntN(16)), b: uint64(rng.IntN(16))<<40 | (1<<40 - 1 - uint64(rng.IntN(4)))}
	}
	for step := range 50_000 {
		k := key()
		switch rng.IntN(3) {
		case 0, 1:
			v := uint32(rng.IntN(1000))
			tb.set(k, v)
			model[k] = v
		case 2:
			if tb.n == 0 {
				continue
			}
			// Delete the entry holding k, if any, as eviction does.
			m := tb.mask()
			for i := k.b & m; tb.entries[i].ref != 0; i = (i + 1) & m {
				if tb.entries[i].key == k {
					tb.deleteAt(i)
					break
				}
			}
			delete(model, k)
		}
		if tb.n != len(model) {
			t.Fatalf("step %d: table holds %d, map %d", step, tb.n, len(model))
		}
		if step%1000 == 0 {
			for k, v := range model {
				if got := tb.get(k); got != v {
					t.Fatalf("step %d: get %v = %d, want %d", step, k, got, v)
				}
			}
			n := 0
			for _, e := range tb.entries {
				if e.ref != 0 {
					n++
					if _, ok := model[e.key]; !ok {
						t.Fatalf("step %d: table holds %v, deleted", step, e.key)
					}
				}
			}
			if n != len(model) {
				t.Fatalf("step %d: %d entries, want %d", step, n, len(model))
			}
		}
	}
}
