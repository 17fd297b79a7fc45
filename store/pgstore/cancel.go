package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice"
)

// An admission whose caller stopped waiting after it was sent may have
// committed anyway: its answer was lost to a reset, or came after the
// timeout. Nobody would settle it, and its budget reservation would be
// charged by the sweep and its leases held until they expire, for a call
// answered 503. So the store releases it itself, as a settlement with
// nothing used would: budget reservations by their reservation row (which
// is there only if the admission committed, so a release of one that did
// not does nothing), leases by the batch's ID. A rate charge is kept, as
// nothing tells whether it was applied: it refills.
//
// The first attempt waits one timeout: the server's statement_timeout is
// the store's timeout, so by then a statement the server had received is
// over, committed or cancelled. But a statement held up in the network (a
// congested or stalled link, bytes a proxy still holds) can reach the
// server after the release and commit then. So the release, once taken, is
// sent again, at pauses doubling from cancelRepeatMin to cancelRepeatMax,
// until the batch's deadline (when the sweep settles what is left): a late
// admission holds its places for about as long as it was late, at most
// cancelRepeatMax. Releasing twice is harmless: the reservation row and
// the leases are gone after the first.

// maxCancels bounds the releases outstanding at once; past it, an
// admission whose caller gave up is left to its lease expiry and the sweep.
const maxCancels = 10_000

// Pauses of a release: retries of one that failed, and repeats of one
// taken.
const (
	cancelRetryMin  = 50 * time.Millisecond
	cancelRetryMax  = time.Second
	cancelRepeatMin = 250 * time.Millisecond
	cancelRepeatMax = 5 * time.Second
)

// mayHaveRun reports whether a call that failed with err may have been
// applied: not when the server answered with an error (the transaction was
// rolled back) nor when nothing was sent.
func mayHaveRun(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	return !pgconn.SafeToRetry(err)
}

// cancelLater releases, from a goroutine of its own, the admission of b
// whose caller gave up, again and again until the batch's deadline.
func (s *Store) cancelLater(now time.Time, b *sluice.Batch) {
	release := sluice.Batch{ID: b.ID, Deadline: b.Deadline, Charges: make([]sluice.Charge, 0, len(b.Charges))}
	known := false
	for _, c := range b.Charges {
		switch c.Kind {
		case sluice.KindBudget:
			c.Actual, known = 0, true
		case sluice.KindConcurrency:
			known = true
		default:
			c.Actual = c.Amount
		}
		release.Charges = append(release.Charges, c)
	}
	if !known {
		return
	}
	if s.pendingCancels.Add(1) > maxCancels {
		s.pendingCancels.Add(-1)
		return
	}
	until := time.Now().Add(b.Deadline.Sub(now))
	s.cancels.Add(1)
	go func() {
		defer s.cancels.Done()
		defer s.pendingCancels.Add(-1)
		pause, retry, repeat := s.timeout, cancelRetryMin, cancelRepeatMin
		for {
			t := time.NewTimer(pause)
			select {
			case <-s.closing:
				t.Stop()
				return
			case <-t.C:
			}
			if time.Now().After(until) {
				return
			}
			if err := s.Settle(context.Background(), time.Now(), release); err != nil {
				pause, retry = retry, min(2*retry, cancelRetryMax)
				continue
			}
			pause, repeat, retry = repeat, min(2*repeat, cancelRepeatMax), cancelRetryMin
		}
	}()
}
