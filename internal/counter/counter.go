// Package counter holds the arithmetic of Sluice's three kinds of counter,
// as pure functions of the time: a rate bucket (GCRA with debt), a budget
// for one calendar period, and the leases of a concurrency cap. Times are
// Unix nanoseconds and durations nanoseconds. memstore keeps its counters
// with it; the Lua of redisstore and the PL/pgSQL of pgstore implement the
// same rules and are checked against memstore by differential tests.
//
// A budget's figures saturate: every amount, limit and counter is taken
// within [0, Ceiling], and a sum past Ceiling stays at Ceiling, so no input
// wraps a counter negative or past what a store can hold exactly.
package counter

import "math/bits"

// Ceiling is the most a budget counter holds, and the most any amount or
// limit counts for: 2^53 (9.0e15 tokens or micro-dollars, $9 billion), the
// largest integer below which a double (the number of Redis's Lua) holds
// every integer exactly, so that every store keeps the same figures. A
// counter at Ceiling is spent for any limit: a limit above it counts as
// Ceiling.
const Ceiling = 1 << 53

// Clamp returns x within [0, Ceiling].
func Clamp(x int64) int64 { return min(max(x, 0), Ceiling) }

// Add returns the sum of a and b, each clamped, saturating at Ceiling.
func Add(a, b int64) int64 { return min(Clamp(a)+Clamp(b), Ceiling) }

// Result is what checking a charge against a counter found.
type Result struct {
	// Allowed reports whether the charge fits.
	Allowed bool
	// Remaining is the room left: after the charge when allowed, before it
	// otherwise.
	Remaining int64
	// Used is the usage counted: a bucket's drawn level, a budget's
	// settled plus reserved usage, the leases held.
	Used int64
	// RetryAfter is, for a refused rate or concurrency charge, how long
	// until it may fit.
	RetryAfter int64
	// ResetAt is when the counter is whole again: a full bucket, the end
	// of the period, the earliest lease expiry (0 for none).
	ResetAt int64
}

// Bucket is a rate rule's bucket: Burst units of capacity refilled at Limit
// units per Window.
type Bucket struct{ Limit, Burst, Window int64 }

// Rate is a bucket's state: the theoretical arrival time (TAT) of the next
// unit, TAT plus Frac/Limit of a nanosecond, kept exact so that a bucket
// admits exactly its burst whatever the limit and window. A bucket whose
// TAT is not after now is full. DrawnAt is the limit the bucket was last
// drawn at: a changed limit keeps the units used, not the time. The zero
// Rate is a full bucket.
type Rate struct{ TAT, Frac, DrawnAt int64 }

// Full reports whether nothing is drawn from the bucket at now.
func (s Rate) Full(now int64) bool { return s.TAT < now || s.TAT == now && s.Frac == 0 }

// start returns where the bucket's next charge begins: its TAT, carried
// over to a changed limit, or now if the bucket is full.
func (b Bucket) start(s Rate, now int64) (tat, frac int64) {
	if s.Full(now) {
		return now, 0
	}
	if s.DrawnAt != 0 && s.DrawnAt != b.Limit {
		// (tat-now)*limit + frac is the units used times the window,
		// whatever the limit: carry it over to the new limit.
		q, r, ok := mul(s.TAT-now, s.DrawnAt).add(uint64(s.Frac)).div(b.Limit)
		if !ok {
			q, r = 1<<62, 0
		}
		return now + q, r
	}
	return s.TAT, s.Frac
}

// advance adds n units to (tat, frac); false when it overflows.
func (b Bucket) advance(tat, frac, n int64) (int64, int64, bool) {
	q, r, ok := mul(n, b.Window).add(uint64(frac)).div(b.Limit)
	return tat + q, r, ok
}

// drawn returns how far (tat, frac) is ahead of now, in ns times Limit.
func (b Bucket) drawn(tat, frac, now int64) u128 {
	if tat < now {
		return u128{}
	}
	return mul(tat-now, b.Limit).add(uint64(frac))
}

// remaining is the units that fit now in a bucket drawn that far.
func (b Bucket) remaining(drawn u128) int64 {
	capacity := mul(b.Burst, b.Window)
	if capacity.less(drawn) {
		return 0
	}
	q, _, _ := capacity.minus(drawn).div(b.Window)
	return q
}

func resetAt(tat, frac int64) int64 {
	if frac > 0 {
		tat++
	}
	return tat
}

// Check evaluates a charge of amount units at now and returns the state
// the bucket would have if it were applied (the charge is applied only by
// storing that state, when the whole admission is allowed).
func (b Bucket) Check(s Rate, amount, now int64) (Rate, Result) {
	tat, frac := b.start(s, now)
	before := b.drawn(tat, frac, now)
	newTat, newFrac, ok := b.advance(tat, frac, amount)
	capacity := mul(b.Burst, b.Window)
	after := b.drawn(newTat, newFrac, now)
	var res Result
	if ok && !capacity.less(after) {
		res = Result{Allowed: true, Remaining: b.remaining(after), ResetAt: resetAt(newTat, newFrac)}
	} else {
		res = Result{Remaining: b.remaining(before), ResetAt: resetAt(tat, frac), RetryAfter: 1 << 62}
		if ok {
			wait, rem, _ := after.minus(capacity).div(b.Limit)
			if rem > 0 {
				wait++
			}
			res.RetryAfter = wait
		}
	}
	res.Used = b.Burst - res.Remaining
	return Rate{TAT: newTat, Frac: newFrac, DrawnAt: b.Limit}, res
}

// Adjust moves the bucket by delta units at settlement: a refund gives room
// back (never more than a full bucket), an overrun draws the bucket into
// debt, bounded by one burst below empty.
func (b Bucket) Adjust(s Rate, delta, now int64) Rate {
	if delta == 0 {
		return s
	}
	tat, frac := b.start(s, now)
	if delta > 0 {
		newTat, newFrac, ok := b.advance(tat, frac, delta)
		most := mul(2*b.Burst, b.Window)
		if !ok || most.less(b.drawn(newTat, newFrac, now)) {
			q, r, _ := most.div(b.Limit)
			newTat, newFrac = now+q, r
		}
		return Rate{TAT: newTat, Frac: newFrac, DrawnAt: b.Limit}
	}
	q, r, ok := mul(-delta, b.Window).div(b.Limit)
	if !ok {
		return Rate{TAT: now, DrawnAt: b.Limit}
	}
	tat, frac = tat-q, frac-r
	if frac < 0 {
		frac += b.Limit
		tat--
	}
	if tat < now {
		tat, frac = now, 0
	}
	return Rate{TAT: tat, Frac: frac, DrawnAt: b.Limit}
}

// Budget is a budget's state for one period: the usage settled, the
// amounts reserved by admissions not yet settled, and the period's end.
type Budget struct{ Used, Reserved, End int64 }

// Check evaluates a charge of amount against limit. A spent budget refuses
// even a charge of nothing.
func (s Budget) Check(limit, amount, periodEnd int64) Result {
	inUse, amount, limit := Add(s.Used, s.Reserved), Clamp(amount), Clamp(limit)
	res := Result{Allowed: inUse+amount <= limit && (amount > 0 || inUse < limit), ResetAt: periodEnd}
	if res.Allowed {
		inUse += amount
	}
	res.Used, res.Remaining = inUse, max(0, limit-inUse)
	return res
}

// Reserve holds amount until settlement.
func (s Budget) Reserve(amount, periodEnd int64) Budget {
	return Budget{Used: Clamp(s.Used), Reserved: Add(s.Reserved, amount), End: periodEnd}
}

// Settle replaces a reservation of amount by the actual usage.
func (s Budget) Settle(amount, actual, periodEnd int64) Budget {
	return Budget{Used: Add(s.Used, actual), Reserved: max(0, Clamp(s.Reserved)-Clamp(amount)), End: periodEnd}
}

// Idle reports whether the budget holds nothing worth keeping at now: no
// reservation, and no usage or a period that has ended.
func (s Budget) Idle(now int64) bool { return s.Reserved == 0 && (s.Used == 0 || s.End <= now) }

// Lease is one admitted call's place under a concurrency cap, held until
// settled or until it expires.
type Lease struct {
	ID     uint64
	Expiry int64
}

// Live returns leases without those expired at now, reusing its array.
func Live(leases []Lease, now int64) []Lease {
	live := leases[:0]
	for _, l := range leases {
		if l.Expiry > now {
			live = append(live, l)
		}
	}
	clear(leases[len(live):])
	return live
}

// Drop returns leases without the lease of admission id, reusing its array.
func Drop(leases []Lease, id uint64) []Lease {
	for i, l := range leases {
		if l.ID == id {
			return append(leases[:i], leases[i+1:]...)
		}
	}
	return leases
}

// CheckLeases evaluates one more lease against limit, given the live
// leases held at now.
func CheckLeases(live []Lease, limit, now int64) Result {
	held := int64(len(live))
	res := Result{Allowed: held < limit}
	if res.Allowed {
		held++
	}
	res.Used, res.Remaining = held, max(0, limit-held)
	for _, l := range live {
		if res.ResetAt == 0 || l.Expiry < res.ResetAt {
			res.ResetAt = l.Expiry
		}
	}
	if res.ResetAt > 0 && !res.Allowed {
		res.RetryAfter = res.ResetAt - now
	}
	return res
}

// u128 is an unsigned 128-bit integer, for exact bucket arithmetic.
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

// div returns x/d and x%d; false when the quotient does not fit in 62 bits.
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
