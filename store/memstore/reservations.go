package memstore

import (
	"cmp"
	"context"
	"maps"
	"slices"

	"github.com/sluicehq/sluice"
)

// Store is an admin.ReservationLister.
var _ interface {
	Reservations(context.Context, int) ([]sluice.Batch, error)
} = (*Store)(nil)

// Reservations lists the open batches with a budget charge, the soonest
// deadline first (then by ID): those the sweep would settle.
func (s *Store) Reservations(_ context.Context, limit int) ([]sluice.Batch, error) {
	if limit <= 0 {
		return nil, nil
	}
	s.openMu.Lock()
	open := slices.SortedFunc(maps.Values(s.open), func(a, b openBatch) int {
		return cmp.Or(a.deadline.Compare(b.deadline), cmp.Compare(a.batch.ID, b.batch.ID))
	})
	s.openMu.Unlock()
	// An admitted batch's charges stay as they are until it is settled
	// (the engine writes only Actual), so they are read without the lock,
	// as the sweep reads them.
	open = open[:min(limit, len(open))]
	out := make([]sluice.Batch, len(open))
	for i, o := range open {
		b := o.batch
		r := sluice.Batch{ID: b.ID, Deadline: o.deadline}
		for j := range b.Charges {
			switch c := &b.Charges[j]; c.Kind {
			case sluice.KindBudget:
				r.Charges = append(r.Charges, sluice.Charge{Key: c.Key, Kind: c.Kind, Amount: c.Amount})
			case sluice.KindConcurrency:
				r.Charges = append(r.Charges, sluice.Charge{Key: c.Key, Kind: c.Kind, Amount: 1})
			}
		}
		out[i] = r
	}
	return out, nil
}
