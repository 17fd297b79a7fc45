package memstore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// RenewLeases moves the deadline of each open batch of renewals, and the
// expiry of its leases, to the renewal's deadline. A batch settled, swept
// or past its deadline is left alone, as is a lease freed or expired.
func (s *Store) RenewLeases(_ context.Context, now time.Time, renewals []sluice.Batch) error {
	for _, b := range renewals {
		// Move the open batch's deadline later; a batch with a budget
		// charge that is not open (settled or swept), or past its
		// deadline, is left alone.
		s.openMu.Lock()
		o, open := s.open[b.ID]
		open = open && o.Deadline.After(now)
		if open && b.Deadline.After(o.Deadline) {
			o.Deadline = b.Deadline
			s.open[b.ID] = o
		}
		s.openMu.Unlock()
		if !open && hasBudget(b) {
			continue
		}
		// Move the expiry of b's live leases later.
		at, expiry := now.UnixNano(), b.Deadline.UnixNano()
		var ofBuf, lockBuf [8]int
		of, lock := s.lock(b.Charges, ofBuf[:0], lockBuf[:0])
		for i := range b.Charges {
			if st := s.shards[of[i]].find(b.Charges[i].Key); st != nil {
				for j := range st.leases {
					if l := &st.leases[j]; l.ID == b.ID && l.Expiry > at && l.Expiry < expiry {
						l.Expiry = expiry
					}
				}
			}
		}
		s.unlock(lock)
	}
	return nil
}
