// Package inproc holds the shapes that the engine (the root package) and the
// in-process store (store/memstore) share for admissions that never leave
// the process. They are plain values: an admission's pooled state holds
// them inline, so an admission allocates only its small handle, and a
// store reads them without the strings and time.Time fields of
// sluice.Charge.
package inproc

// Kind is the algorithm of a charge's rule.
type Kind uint8

// The kinds, as sluice.KindRate, sluice.KindBudget and
// sluice.KindConcurrency.
const (
	Rate Kind = iota + 1
	Budget
	Concurrency
)

// String returns the kind's name as sluice.Kind spells it ("rate",
// "budget", "concurrency"), or "" for none.
func (k Kind) String() string {
	switch k {
	case Rate:
		return "rate"
	case Budget:
		return "budget"
	case Concurrency:
		return "concurrency"
	}
	return ""
}

// Charge is one rule's part of an admission. Times are Unix nanoseconds
// and durations nanoseconds; a zero time means none. It holds no pointer,
// so that a state holding charges inline is cheap for the garbage
// collector.
type Charge struct {
	// The admission's Subjects[Subject], Rule and Period name the counter,
	// as sluice.CounterKey.
	Rule   uint64
	Period int64
	// Window is a rate rule's refill window.
	Window int64
	// Limit and Burst are the effective values; a Burst of 0 means Limit.
	Limit int64
	Burst int64
	// Amount is charged at admission; Actual replaces it at settlement.
	Amount int64
	Actual int64
	// PeriodEnd is when a budget's period ends.
	PeriodEnd int64

	// Filled by the store at admission, as in sluice.Charge.
	Remaining  int64
	Used       int64
	RetryAfter int64
	ResetAt    int64

	Kind Kind
	// Shadow charges are counted but never refuse.
	Shadow bool
	// Release is set when the sweep refunds an expired budget charge
	// rather than charging it.
	Release bool
	Allowed bool

	// Subject indexes the admission's Subjects.
	Subject uint32

	// RuleIndex and Source are the engine's: which rule of its policy the
	// charge belongs to and where its limit came from. Stores ignore them.
	RuleIndex uint32
	Source    uint8

	// Shard and Ref are the store's: where it found the charge's counter
	// at admission, so that settling finds it again without looking the
	// subject up. The engine leaves them alone; zero means unknown.
	Shard uint16
	Ref   uint64
}

// Capacity returns a rate charge's bucket size.
func (c *Charge) Capacity() int64 {
	if c.Burst > 0 {
		return c.Burst
	}
	return c.Limit
}

// Admission is the set of charges of one reservation.
type Admission struct {
	// ID is unique per Limiter.
	ID uint64
	// Deadline is when the sweep may settle the admission and when its
	// leases expire (Unix nanoseconds).
	Deadline int64
	Charges  []Charge
	// Subjects are the distinct subjects of Charges.
	Subjects []string
}

// SubjectOf returns the subject of charge c of a.
func (a *Admission) SubjectOf(c *Charge) string { return a.Subjects[c.Subject] }

// HasBudget reports whether a carries a budget charge, which the sweep must
// settle if nobody does.
func (a *Admission) HasBudget() bool {
	for i := range a.Charges {
		if a.Charges[i].Kind == Budget {
			return true
		}
	}
	return false
}

// Detached returns a copy of a that shares nothing with it, for a store
// that must keep an admission past the store call that settles it (the
// engine reuses an admission's memory once it is settled). Every field is
// copied but each charge's Actual, which the engine may be writing while
// the store copies; it is left zero.
func (a *Admission) Detached() *Admission {
	out := &Admission{ID: a.ID, Deadline: a.Deadline, Charges: make([]Charge, len(a.Charges)),
		Subjects: append([]string(nil), a.Subjects...)}
	for i := range a.Charges {
		c, d := &a.Charges[i], &out.Charges[i]
		d.Rule, d.Period, d.Window, d.Limit, d.Burst = c.Rule, c.Period, c.Window, c.Limit, c.Burst
		d.Amount, d.PeriodEnd = c.Amount, c.PeriodEnd
		d.Remaining, d.Used, d.RetryAfter, d.ResetAt = c.Remaining, c.Used, c.RetryAfter, c.ResetAt
		d.Kind, d.Shadow, d.Release, d.Allowed = c.Kind, c.Shadow, c.Release, c.Allowed
		d.Subject, d.RuleIndex, d.Source, d.Shard, d.Ref = c.Subject, c.RuleIndex, c.Source, c.Shard, c.Ref
	}
	return out
}
