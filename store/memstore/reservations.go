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

// Reservations lists at most limit of the open batches with a budget
// charge, the soonest deadline first (then by ID): those the sweep would
// settle.
func (s *Store) Reservations(_ context.Context, limit int) ([]sluice.Batch, error) {
	s.openMu.Lock()
	open := slices.SortedFunc(maps.Values(s.open), func(a, b sluice.Batch) int {
		return cmp.Or(a.Deadline.Compare(b.Deadline), cmp.Compare(a.ID, b.ID))
	})
	s.openMu.Unlock()
	// The open batches are the store's own copies, of which only the sweep
	// writes anything (each charge's Actual), so their keys and amounts
	// are read without the lock.
	open = open[:max(0, min(limit, len(open)))]
	for i, o := range open {
		open[i].Charges = nil
		for j := range o.Charges {
			switch c := &o.Charges[j]; c.Kind {
			case sluice.KindBudget:
				open[i].Charges = append(open[i].Charges, sluice.Charge{Key: c.Key, Kind: c.Kind, Amount: c.Amount})
			case sluice.KindConcurrency:
				open[i].Charges = append(open[i].Charges, sluice.Charge{Key: c.Key, Kind: c.Kind, Amount: 1})
			}
		}
	}
	return open, nil
}
