package admin

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
)

// Reservation is an open reservation: admitted, not yet settled or swept.
type Reservation struct {
	// ID is written as a string: it may pass 2^53, past which a
	// JavaScript number is not exact.
	ID uint64 `json:"id,string"`
	// Admitted and Age (how long it has been open, in seconds) are known
	// for the reservations this process admitted; the store does not
	// keep them.
	Admitted time.Time           `json:"admitted,omitzero"`
	Deadline time.Time           `json:"deadline"`
	Age      *float64            `json:"age_seconds,omitempty"`
	Charges  []ReservationCharge `json:"charges"`
}

// ReservationCharge is one counter a reservation holds an amount on.
type ReservationCharge struct {
	// Rule and Metric name the rule in force whose counter it is; empty
	// when no rule in force counts there any more (changed or removed
	// since the admission). Amount is in the metric's unit: micro-dollars
	// for cost.
	Rule   string      `json:"rule,omitempty"`
	Metric string      `json:"metric,omitempty"`
	Kind   sluice.Kind `json:"kind"`
	// Subject is the counter's subject value (parts of a composite joined
	// by "+").
	Subject string `json:"subject"`
	Amount  int64  `json:"amount"`
}

// Where a ReservationList comes from.
const (
	// FromStore: the store's record of every replica's reservations.
	FromStore = "store"
	// FromProcess: the reservations this process admitted, the store
	// having no listing (not a ReservationLister).
	FromProcess = "process"
)

// ReservationList is a list of open reservations and where it comes from.
type ReservationList struct {
	Reservations []Reservation `json:"reservations"`
	// Source is FromStore or FromProcess.
	Source string `json:"source"`
	// Truncated reports that more reservations were open than listed.
	Truncated bool `json:"truncated"`
}

// ReservationLister is a store that can list its open reservations as
// every process sharing the store sees them: the admitted batches with a
// budget charge that neither Settle nor Sweep has settled yet, whichever
// Limiter admitted them. These are the reservations the store records for
// its sweep; a batch of rate charges and leases only has no record (its
// leases expire by themselves) and is not listed. Every store Sluice ships
// is one.
type ReservationLister interface {
	// Reservations returns at most limit open reservations, the soonest
	// deadline first, and none when limit is not positive. A reservation
	// past its deadline is listed until a sweep settles it. Each is the
	// batch as the store records it: its ID, its Deadline (renewed, if it
	// was), and its budget charges and the leases the record frees, in the
	// store's order, each with its Key, Kind and what it holds as its
	// Amount (a budget charge's reservation, 1 for a lease). Rate charges
	// hold nothing once admitted and are not recorded; on a Redis Cluster,
	// neither is a lease in a hash slot without a budget charge of the
	// batch.
	Reservations(ctx context.Context, limit int) ([]sluice.Batch, error)
}

// RuleOf finds the rule in force whose counters carry a fingerprint
// (sluice.CounterKey.Rule): Limiter.RuleOf.
type RuleOf func(id uint64) (sluice.Rule, bool)

// Reservations lists up to limit open reservations at now, the soonest
// deadline first: from the store when it is a ReservationLister
// (those of every replica sharing it: the batches with a budget charge, as
// the store records them), else those open in this process (every
// admitted batch, with all its charges).
// Each charge is named by its rule and metric when rules finds it.
func (m *Metrics) Reservations(ctx context.Context, now time.Time, limit int, rules RuleOf) (ReservationList, error) {
	list := ReservationList{Reservations: []Reservation{}, Source: FromStore}
	stores := m.storesSnapshot()
	if len(stores) == 0 {
		list.Source = FromProcess
	}
	for _, s := range stores {
		lister, ok := s.Store.(ReservationLister)
		if !ok {
			list.Source = FromProcess
			list.Reservations = append(list.Reservations, s.openReservations(now, rules)...)
			continue
		}
		// One more than asked tells whether the list is cut.
		open, err := lister.Reservations(ctx, limit+1)
		if err != nil {
			return ReservationList{}, &sluice.StoreError{Op: "reservations", Err: err}
		}
		list.Reservations = append(list.Reservations, s.stored(open, now, rules)...)
	}
	slices.SortFunc(list.Reservations, func(a, b Reservation) int {
		return cmp.Or(a.Deadline.Compare(b.Deadline), cmp.Compare(a.ID, b.ID))
	})
	if len(list.Reservations) > limit {
		list.Reservations, list.Truncated = list.Reservations[:limit], true
	}
	return list, nil
}

// openReservations lists the batches open in this process.
func (s *instrumentedStore) openReservations(now time.Time, rules RuleOf) []Reservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Reservation, 0, len(s.open))
	for id, ob := range s.open {
		r := Reservation{ID: id, Deadline: ob.deadline.UTC()}
		r.since(ob.admitted, now)
		for _, c := range ob.charges {
			r.Charges = append(r.Charges, chargeOf(rules, c.key, c.kind, c.amount))
		}
		out = append(out, r)
	}
	return out
}

// stored turns the store's listing into Reservations, with the admission
// time of those this process admitted.
func (s *instrumentedStore) stored(open []sluice.Batch, now time.Time, rules RuleOf) []Reservation {
	out := make([]Reservation, len(open))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range open {
		r := Reservation{ID: o.ID, Deadline: o.Deadline.UTC(), Charges: make([]ReservationCharge, len(o.Charges))}
		if ob, ok := s.open[o.ID]; ok {
			r.since(ob.admitted, now)
		}
		for j, c := range o.Charges {
			r.Charges[j] = chargeOf(rules, c.Key, c.Kind, c.Amount)
		}
		out[i] = r
	}
	return out
}

// chargeOf is what a reservation holds on counter key: amount of kind,
// named by the rule rules finds.
func chargeOf(rules RuleOf, key sluice.CounterKey, kind sluice.Kind, amount int64) ReservationCharge {
	c := ReservationCharge{Kind: kind, Subject: displaySubject(key.Subject), Amount: amount}
	if rules == nil {
		return c
	}
	if r, ok := rules(key.Rule); ok {
		c.Rule, c.Metric = r.Name, string(r.Metric)
	}
	return c
}

// since sets when r was admitted and its age at now.
func (r *Reservation) since(admitted, now time.Time) {
	age := now.Sub(admitted).Seconds()
	r.Admitted, r.Age = admitted.UTC(), &age
}

// displaySubject writes a counter's subject for people: the parts of a
// composite joined by "+", a value after its org (or a session after its
// key) by "/".
func displaySubject(s string) string {
	b := []byte(s)
	for i := range b {
		switch b[i] {
		case 0x1f:
			b[i] = '+'
		case 0x1e:
			b[i] = '/'
		}
	}
	return string(b)
}
