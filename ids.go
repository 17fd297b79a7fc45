package sluice

import "sync/atomic"

// idSource hands out reservation ids without making every admission write
// one shared counter: each admission's state (see resState) takes a block
// of ids from the counter and serves its admissions from it. States are
// pooled per P, so a block is mostly used by one P. Ids stay unique; they
// are not in admission order.
type idSource struct {
	next atomic.Uint64
}

type idBlock struct{ next, end uint64 }

const idBlockSize = 1024

// take returns the next id of b, taking a new block when b is used up.
func (s *idSource) take(b *idBlock) uint64 {
	if b.next == b.end {
		b.end = s.next.Add(idBlockSize)
		b.next = b.end - idBlockSize
	}
	id := b.next
	b.next++
	return id
}

// stripedCounter is a counter written by every admission, spread over
// cache lines so that two cores counting at once do not contend. The
// leading pad keeps the first stripe off the line of the fields before it,
// which every admission reads.
type stripedCounter struct {
	_       [64]byte
	stripes [8]struct {
		n atomic.Int64
		_ [56]byte
	}
}

// add counts one, in the stripe picked by hint: an id, whose block of
// idBlockSize ids, all taken by one P, picks the stripe.
func (c *stripedCounter) add(hint uint64) { c.stripes[hint/idBlockSize%8].n.Add(1) }

func (c *stripedCounter) sum() int64 {
	var n int64
	for i := range c.stripes {
		n += c.stripes[i].n.Load()
	}
	return n
}
