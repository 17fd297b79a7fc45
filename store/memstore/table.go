package memstore

// table maps subject keys to the first of their slots: open addressing
// with linear probing over the key's own hash bits, so that a lookup
// hashes nothing (the key is a hash already) and reads one entry, and
// nothing in it is a pointer.
type table struct {
	entries []entry
	n       int
}

// entry is one subject of a table; ref is the subject's first slot plus
// one, 0 for an empty entry.
type entry struct {
	key subjectKey
	ref uint32
}

const minTable = 8

func (t *table) mask() uint64 { return uint64(len(t.entries) - 1) }

// get returns the first slot of subject k, noSlot if it has none.
func (t *table) get(k subjectKey) uint32 {
	if t.n == 0 {
		return noSlot
	}
	m := t.mask()
	for i := k.b & m; ; i = (i + 1) & m {
		e := &t.entries[i]
		if e.ref == 0 {
			return noSlot
		}
		if e.key == k {
			return e.ref - 1
		}
	}
}

// set makes head the first slot of subject k.
func (t *table) set(k subjectKey, head uint32) {
	if (t.n+1)*4 > len(t.entries)*3 {
		t.grow()
	}
	m := t.mask()
	for i := k.b & m; ; i = (i + 1) & m {
		e := &t.entries[i]
		if e.ref == 0 {
			*e = entry{key: k, ref: head + 1}
			t.n++
			return
		}
		if e.key == k {
			e.ref = head + 1
			return
		}
	}
}

func (t *table) grow() {
	old := t.entries
	t.entries = make([]entry, max(minTable, 2*len(old)))
	m := t.mask()
	for _, e := range old {
		if e.ref == 0 {
			continue
		}
		i := e.key.b & m
		for t.entries[i].ref != 0 {
			i = (i + 1) & m
		}
		t.entries[i] = e
	}
}

// deleteAt empties entry i, moving back the entries after it that would
// otherwise no longer be found.
func (t *table) deleteAt(i uint64) {
	m := t.mask()
	for j := (i + 1) & m; t.entries[j].ref != 0; j = (j + 1) & m {
		home := t.entries[j].key.b & m
		// Entry j may fill the hole at i unless its home lies in (i, j].
		if (j-home)&m >= (j-i)&m {
			t.entries[i] = t.entries[j]
			i = j
		}
	}
	t.entries[i] = entry{}
	t.n--
}
