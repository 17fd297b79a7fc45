package memstore

import (
	"math/bits"
	"unsafe"

	"github.com/sluicehq/sluice/internal/inproc"
)

// slot is one counter of a subject: the rest of its sluice.CounterKey, its
// state, and the subject's next slot (noSlot if none). It holds no
// pointer. gen counts the times the slot was given back, so that a
// reference to it taken at admission can tell whether it still holds the
// same counter. A slot is one cache line, and chunks of slots start on
// one, so that a counter is read and written in one line.
type slot struct {
	rule   uint64
	period int64
	counter
	next uint32
	gen  uint32
}

// counter is the state of one CounterKey. A key belongs to one rule, so
// to one kind: the three words of state are a rate bucket's (tat, frac,
// drawnAt), a budget's (budgetState, through budget) or a concurrency
// counter's inline lease (through inline), and kind says which.
type counter struct {
	// Rate: the theoretical arrival time of the next unit, in Unix
	// nanoseconds plus frac/limit of a nanosecond, kept exact so that a
	// bucket admits exactly its burst whatever the limit and window.
	tat, frac int64
	// drawnAt is the limit the bucket was last drawn at: a changed limit
	// keeps the units used, not the time.
	drawnAt int64
	// touched is when the counter was last admitted to or settled (Unix
	// ns): eviction spares it for a grace period after that.
	touched int64
	// Concurrency: a counter keeps one lease inline, in the words of
	// tat and frac (see inline), when inl is set; the others are kept
	// out of line, at index lease-1 in shard.leases (0 for none), only
	// while the inline one is held too.
	lease uint32
	// kind is the kind of the charges applied to the counter, 0 until
	// the first: a counter of kind 0 has all its state zero, which reads
	// as a full bucket, an empty budget and no lease alike.
	kind inproc.Kind
	inl  bool
}

// budgetState is a budget counter's state, in the words of a rate
// bucket's: settled usage, open reservations, end of the period (Unix ns).
type budgetState struct{ used, reserved, end int64 }

// budget returns c's state as a budget's. It shares c's first three words
// (tat, frac, drawnAt), which a budget counter does not otherwise use.
func (c *counter) budget() *budgetState {
	return (*budgetState)(unsafe.Pointer(c))
}

type lease struct {
	id     uint64
	expiry int64
}

// inline returns c's inline lease, held when c.inl is set. It shares c's
// first two words (tat, frac), which a concurrency counter does not
// otherwise use.
func (c *counter) inline() *lease {
	return (*lease)(unsafe.Pointer(c))
}

// claim makes c a counter of kind k. A counter is charged under one kind
// only; a key charged under another kind than before (which no Limiter
// does: a rule's identity covers its kind) starts afresh as k.
func (sh *shard) claim(c *counter, k inproc.Kind) {
	if c.kind != k {
		sh.reclaim(c, k)
	}
}

// reclaim is claim for a counter not yet of kind k, out of line: the
// admission path meets it once per counter.
//
//go:noinline
func (sh *shard) reclaim(c *counter, k inproc.Kind) {
	if k == 0 {
		// A charge of no known kind reads and writes nothing.
		return
	}
	if c.kind != 0 {
		sh.dropLeases(c)
		c.tat, c.frac, c.drawnAt, c.inl = 0, 0, 0, false
	}
	c.kind = k
}

// idle reports whether c holds nothing worth keeping (a full bucket, an
// empty or finished budget, no live lease) and has not been touched for
// grace ns.
func (sh *shard) idle(c *counter, now, grace int64) bool {
	if now-c.touched < grace {
		return false
	}
	switch c.kind {
	case inproc.Budget:
		b := c.budget()
		return b.reserved == 0 && (b.used == 0 || b.end <= now)
	case inproc.Concurrency:
		return sh.liveLeases(c, now) == 0
	}
	// A rate counter, or one never charged, whose state is all zero.
	return full(c, now)
}

// u128 is an unsigned 128-bit integer for exact bucket arithmetic.
type u128 struct{ hi, lo uint64 }

func mul(a, b int64) u128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return u128{hi, lo}
}

func (x u128) add(y uint64) u128 {
	lo, carry := bits.Add64(x.lo, y, 0)
	return u128{x.hi + carry, lo}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

func (x u128) minus(y u128) u128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	return u128{x.hi - y.hi - borrow, lo}
}

// div returns x/d and x%d, or ok false when the quotient does not fit in
// 62 bits.
func (x u128) div(d int64) (q, r int64, ok bool) {
	if x.hi >= uint64(d) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(x.hi, x.lo, uint64(d))
	if uq > 1<<62 {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}

// bucket is a rate charge's parameters: capacity burst, refill limit per
// window (ns).
type bucket struct{ limit, burst, window int64 }

func bucketOf(ch *inproc.Charge) bucket {
	return bucket{limit: ch.Limit, burst: ch.Capacity(), window: ch.Window}
}

// start returns where the bucket's next charge begins: the tat, or now if
// the bucket is full.
func (b bucket) start(c *counter, now int64) (tat, frac int64) {
	tat, frac = c.tat, c.frac
	if tat < now || tat == now && frac == 0 {
		return now, 0
	}
	if c.drawnAt != 0 && c.drawnAt != b.limit {
		// (tat-now)*limit + frac is the units used times the window,
		// whatever the limit: carry it over to the new limit.
		drawn := mul(tat-now, c.drawnAt).add(uint64(frac))
		q, r, ok := drawn.div(b.limit)
		if !ok {
			q, r = 1<<62, 0
		}
		return now + q, r
	}
	return tat, frac
}

// advance adds n units to (tat, frac).
func (b bucket) advance(tat, frac, n int64) (int64, int64, bool) {
	q, r, ok := mul(n, b.window).add(uint64(frac)).div(b.limit)
	if !ok {
		return 0, 0, false
	}
	return tat + q, r, true
}

// drawn returns how far (tat, frac) is ahead of now, in ns*limit.
func (b bucket) drawn(tat, frac, now int64) u128 {
	if tat < now {
		return u128{}
	}
	return mul(tat-now, b.limit).add(uint64(frac))
}

// remaining is the units that fit now for a bucket drawn that far.
func (b bucket) remaining(drawn u128) int64 {
	capacity := mul(b.burst, b.window)
	if capacity.less(drawn) {
		return 0
	}
	q, _, _ := capacity.minus(drawn).div(b.window)
	return q
}

func resetAt(tat, frac int64) int64 {
	if frac > 0 {
		tat++
	}
	return tat
}

// full reports whether c's bucket is full at now: nothing drawn.
func full(c *counter, now int64) bool {
	return c.tat < now || c.tat == now && c.frac == 0
}

// check evaluates a rate charge at now without applying it: checkFull for
// a full bucket when it can, else checkExact.
func (b bucket) check(c *counter, ch *inproc.Charge, now int64) (newTat, newFrac int64) {
	if full(c, now) {
		if tat, frac, ok := b.checkFull(ch, now); ok {
			return tat, frac
		}
	}
	return b.checkExact(c, ch, now)
}

// checkFull is checkExact on a full bucket, in 64-bit arithmetic, for a
// charge that fits: ok false, with nothing done, when the charge does not
// fit or its figures do not fit in 64 bits. Starting from (now, 0), the
// charge draws exactly n*window, so it fits when n <= burst, leaving
// burst-n units, and it ends n*window/limit ns later.
func (b bucket) checkFull(ch *inproc.Charge, now int64) (newTat, newFrac int64, ok bool) {
	n := ch.Amount
	if n < 0 || n > b.burst || b.burst-n > 1<<62 || b.window <= 0 || b.limit <= 0 {
		return 0, 0, false
	}
	hi, nw := bits.Mul64(uint64(n), uint64(b.window))
	if hi != 0 {
		return 0, 0, false
	}
	q, r := nw/uint64(b.limit), nw%uint64(b.limit)
	if q > 1<<62 {
		return 0, 0, false
	}
	newTat, newFrac = now+int64(q), int64(r)
	ch.Allowed = true
	ch.Remaining = b.burst - n
	ch.ResetAt = resetAt(newTat, newFrac)
	ch.Used = n
	return newTat, newFrac, true
}

// checkExact evaluates a rate charge of n units at now without applying
// it, in 128-bit arithmetic.
func (b bucket) checkExact(c *counter, ch *inproc.Charge, now int64) (newTat, newFrac int64) {
	tat, frac := b.start(c, now)
	before := b.drawn(tat, frac, now)
	newTat, newFrac, ok := b.advance(tat, frac, ch.Amount)
	capacity := mul(b.burst, b.window)
	after := b.drawn(newTat, newFrac, now)
	if ok && !capacity.less(after) {
		ch.Allowed = true
		ch.Remaining = b.remaining(after)
		ch.ResetAt = resetAt(newTat, newFrac)
	} else {
		ch.Allowed = false
		ch.Remaining = b.remaining(before)
		ch.ResetAt = resetAt(tat, frac)
		if ok {
			wait, rem, _ := after.minus(capacity).div(b.limit)
			if rem > 0 {
				wait++
			}
			ch.RetryAfter = wait
		} else {
			ch.RetryAfter = 1 << 62
		}
	}
	ch.Used = b.burst - ch.Remaining
	return newTat, newFrac
}

// adjust moves the bucket by delta units after settlement: a refund gives
// room back (never more than a full bucket), an overrun draws it into debt
// bounded by one burst.
func (b bucket) adjust(c *counter, delta, now int64) {
	if delta == 0 {
		return
	}
	if delta < 0 && b.limit > 0 && full(c, now) {
		// A refund to a full bucket leaves it full, from now: what
		// adjustExact works out, without dividing.
		c.tat, c.frac, c.drawnAt = now, 0, b.limit
		return
	}
	b.adjustExact(c, delta, now)
}

// adjustExact is adjust in 128-bit arithmetic.
func (b bucket) adjustExact(c *counter, delta, now int64) {
	if delta == 0 {
		return
	}
	tat, frac := b.start(c, now)
	if delta > 0 {
		newTat, newFrac, ok := b.advance(tat, frac, delta)
		limit := mul(2*b.burst, b.window)
		if !ok || limit.less(b.drawn(newTat, newFrac, now)) {
			q, r, _ := limit.div(b.limit)
			newTat, newFrac = now+q, r
		}
		c.tat, c.frac, c.drawnAt = newTat, newFrac, b.limit
		return
	}
	q, r, ok := mul(-delta, b.window).div(b.limit)
	c.drawnAt = b.limit
	if !ok {
		c.tat, c.frac = now, 0
		return
	}
	tat, frac = tat-q, frac-r
	if frac < 0 {
		frac += b.limit
		tat--
	}
	if tat < now {
		tat, frac = now, 0
	}
	c.tat, c.frac = tat, frac
}

// checkBudget evaluates a budget charge without applying it. A spent budget
// refuses even a charge of zero.
func checkBudget(c *counter, ch *inproc.Charge) {
	b := c.budget()
	inUse := b.used + b.reserved
	ch.Allowed = inUse+ch.Amount <= ch.Limit && (ch.Amount > 0 || inUse < ch.Limit)
	if ch.Allowed {
		inUse += ch.Amount
	}
	ch.Used = inUse
	ch.Remaining = max(0, ch.Limit-inUse)
	ch.ResetAt = ch.PeriodEnd
}
