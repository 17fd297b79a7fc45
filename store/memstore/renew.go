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
	for i := range renewals {
		b := &renewals[i]
		if hasBudget(b) && !s.renewOpen(b.ID, now, b.Deadline) {
			continue
		}
		// Move the expiry of b's live leases later.
		at, expiry := now.UnixNano(), b.Deadline.UnixNano()
		var ofBuf, lockBuf [8]int
		of, lock := s.lock(b, ofBuf[:0], lockBuf[:0])
		for i := range b.Charges {
			c := &b.Charges[i]
			if st := s.shards[of[i]].counters[c.Key]; c.Kind == sluice.KindConcurrency && st != nil && st.kind == c.Kind {
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

// renewOpen moves an open batch's deadline later, reporting whether the
// batch is open and not past its deadline at now.
func (s *Store) renewOpen(id uint64, now, deadline time.Time) bool {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	o, ok := s.open[id]
	if !ok || !o.Deadline.After(now) {
		return false
	}
	if deadline.After(o.Deadline) {
		o.Deadline = deadline
		s.open[id] = o
	}
	return true
}
