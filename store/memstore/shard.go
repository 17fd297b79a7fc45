package memstore

import (
	"hash/maphash"
	"sync"
	"unsafe"

	"github.com/sluicehq/sluice/internal/cacheline"
)

// A shard keeps no pointer per subject, so that the garbage collector does
// not scan a million subjects' counters on every cycle: the map from
// subject to counters is keyed by a hash of the subject and holds an
// index, and the counters live in chunks of an arena of pointer-free
// slots. Only concurrency counters holding more than one lease have a
// slice, kept out of line.
//
// A subject is known by a 128-bit keyed hash of its value (two maphash
// values under seeds drawn at random per process), not by the value
// itself. Two subjects whose hashes agree would share counters. For n
// subjects that happens with probability about n²/2^129 (2^-89 for a
// billion subjects); the seeds never leave the process, so a client cannot
// aim for a collision without first learning them.
type subjectKey struct{ a, b uint64 }

// hasher hashes subjects into subjectKeys.
type hasher struct{ a, b maphash.Seed }

func newHasher() hasher { return hasher{a: maphash.MakeSeed(), b: maphash.MakeSeed()} }

func (h hasher) key(subject string) subjectKey {
	return subjectKey{maphash.String(h.a, subject), maphash.String(h.b, subject)}
}

// noSlot ends a subject's list of slots.
const noSlot = ^uint32(0)

// chunkBits sets the slots per arena chunk (256 slots of 64 bytes, 16 KiB,
// which the allocator places on a page).
const chunkBits = 8

// The fields every admission reads or writes (mu, made, ops, subjects,
// and chunks but for its capacity) come first, in the shard's first cache
// line: the line moves between cores with the lock, and one line moves
// faster than two.
type shard struct {
	mu sync.Mutex
	// made counts the slots made since the last eviction scan, ops the
	// admissions (counted only when Options.EvictEvery is set).
	made, ops int32
	// subjects maps each subject to the first of its slots, one per rule
	// and period, linked through slot.next.
	subjects table
	// chunks hold the slots; a slot's address does not change while it
	// is in use. used is how many slots were ever handed out; free heads
	// the list of slots given back.
	chunks []*[1 << chunkBits]slot
	used   uint32
	free   uint32
	// leases holds the leases of the concurrency counters that hold more
	// than one, past the inline one, at counter.lease-1; freeLeases
	// lists the entries given back.
	leases     [][]lease
	freeLeases []uint32
	// cursor is where the next eviction scan starts in subjects.
	cursor uint64
}

// paddedShard keeps neighbouring shards' locks off one cache line.
type paddedShard struct {
	shard
	_ [(cacheline.Size - unsafe.Sizeof(shard{})%cacheline.Size) % cacheline.Size]byte
}

func (sh *shard) init() {
	sh.free = noSlot
	// Every admission reads chunks' array: in lines of its own, as append
	// keeps it once it starts so (see internal/cacheline).
	sh.chunks = cacheline.Slice[*[1 << chunkBits]slot](0, 0)
}

// at returns slot i.
func (sh *shard) at(i uint32) *slot {
	return &sh.chunks[i>>chunkBits][i&(1<<chunkBits-1)]
}

// find returns the slot of (rule, period) in the list from head, or
// noSlot and the list's last slot (noSlot if the list is empty).
func (sh *shard) find(head uint32, rule uint64, period int64) (found, last uint32) {
	last = noSlot
	for i := head; i != noSlot; {
		sl := sh.at(i)
		if sl.rule == rule && sl.period == period {
			return i, last
		}
		last = i
		i = sl.next
	}
	return noSlot, last
}

// add makes a slot for (rule, period) at the end of subject k's list,
// after last (noSlot if the subject has none), and returns it.
func (sh *shard) add(k subjectKey, last uint32, rule uint64, period int64) uint32 {
	i := sh.free
	if i != noSlot {
		sh.free = sh.at(i).next
	} else {
		i = sh.used
		if int(i>>chunkBits) == len(sh.chunks) {
			sh.chunks = append(sh.chunks, new([1 << chunkBits]slot))
		}
		sh.used++
	}
	sh.made++
	sl := sh.at(i)
	*sl = slot{rule: rule, period: period, next: noSlot, gen: sl.gen}
	if last == noSlot {
		sh.subjects.set(k, i)
	} else {
		sh.at(last).next = i
	}
	return i
}

// release gives slot i back, with its leases.
func (sh *shard) release(i uint32) {
	sl := sh.at(i)
	sh.dropLeases(&sl.counter)
	// A new generation: a reservation that found the slot before no
	// longer takes it for its counter.
	*sl = slot{next: sh.free, gen: sl.gen + 1}
	sh.free = i
}

// dropLeases gives back the room c's leases take in shard.leases, if any.
func (sh *shard) dropLeases(c *counter) {
	if c.lease != 0 {
		j := c.lease - 1
		sh.leases[j] = sh.leases[j][:0]
		sh.freeLeases = append(sh.freeLeases, j)
		c.lease = 0
	}
}

// count returns the number of counters held.
func (sh *shard) count() int {
	n := 0
	for _, e := range sh.subjects.entries {
		if e.ref == 0 {
			continue
		}
		for i := e.ref - 1; i != noSlot; i = sh.at(i).next {
			n++
		}
	}
	return n
}

// evict drops the idle counters of the subject at entry e of a locked
// shard, and the subject once it has none, reporting whether it did.
func (sh *shard) evict(e uint64, now, grace int64) (dropped bool) {
	head := sh.subjects.entries[e].ref - 1
	newHead, prev := head, noSlot
	for i := head; i != noSlot; {
		sl := sh.at(i)
		next := sl.next
		if sh.idle(&sl.counter, now, grace) {
			if prev == noSlot {
				newHead = next
			} else {
				sh.at(prev).next = next
			}
			sh.release(i)
		} else {
			prev = i
		}
		i = next
	}
	if newHead == noSlot {
		sh.subjects.deleteAt(e)
		return true
	}
	sh.subjects.entries[e].ref = newHead + 1
	return false
}

// evictScan runs evict on up to n subjects from the shard's cursor on,
// looking at no more than 4n entries, and on each subject at most once: n
// is capped at the subjects the shard holds.
func (sh *shard) evictScan(n int, now, grace int64) {
	t := &sh.subjects
	if t.n == 0 {
		return
	}
	n = min(n, t.n)
	m := t.mask()
	for probes := 0; n > 0 && probes < 4*n; probes++ {
		i := sh.cursor & m
		if t.entries[i].ref != 0 {
			n--
			if sh.evict(i, now, grace) {
				// Another subject may have moved into the entry.
				continue
			}
		}
		sh.cursor = i + 1
	}
}

// evictRange runs evict on the subjects of table entries from to from+n-1
// (fewer if the table is smaller) and returns where the next range starts,
// -1 once the table's end is reached. Between two calls the lock may be
// let go: a subject that moves meanwhile (the table grew, or a deletion
// moved it back across from) may be examined twice or not at all, which
// the next sweep makes up for.
func (sh *shard) evictRange(from, n int, now, grace int64) int {
	t := &sh.subjects
	end := min(from+n, len(t.entries))
	for i := from; i < end; {
		if t.entries[i].ref != 0 && sh.evict(uint64(i), now, grace) {
			continue // another subject may have moved into the entry
		}
		i++
	}
	if end >= len(t.entries) {
		return -1
	}
	return end
}
