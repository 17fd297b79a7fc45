package admin

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// instrumentedStore times a Store's operations and remembers the batches it
// admitted and has not yet settled: the calls in flight in this process.
type instrumentedStore struct {
	sluice.Store
	m *Metrics

	mu   sync.Mutex
	open map[uint64]openBatch
}

var (
	_ sluice.Store         = (*instrumentedStore)(nil)
	_ sluice.AsyncSettler  = (*instrumentedStore)(nil)
	_ sluice.SweepReporter = (*instrumentedStore)(nil)
)

// openBatch is an admitted batch, its charges copied.
type openBatch struct {
	admitted time.Time
	deadline time.Time
	charges  []openCharge
}

type openCharge struct {
	key    sluice.CounterKey
	kind   sluice.Kind
	amount int64
}

func (s *instrumentedStore) Admit(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	start := time.Now()
	ok, err := s.Store.Admit(ctx, now, b, results)
	s.m.observeStore(opAdmit, start, err)
	if ok && err == nil {
		ob := openBatch{admitted: now, deadline: b.Deadline, charges: make([]openCharge, len(b.Charges))}
		for i := range b.Charges {
			c := &b.Charges[i]
			ob.charges[i] = openCharge{key: c.Key, kind: c.Kind, amount: c.Amount}
		}
		s.opened(b.ID, ob)
	}
	return ok, err
}

func (s *instrumentedStore) opened(id uint64, ob openBatch) {
	s.mu.Lock()
	s.open[id] = ob
	s.mu.Unlock()
}

func (s *instrumentedStore) closed(id uint64) {
	s.mu.Lock()
	delete(s.open, id)
	s.mu.Unlock()
}

func (s *instrumentedStore) Settle(ctx context.Context, now time.Time, b sluice.Batch) error {
	start := time.Now()
	err := s.Store.Settle(ctx, now, b)
	s.m.observeStore(opSettle, start, err)
	if err == nil {
		s.closed(b.ID)
	}
	return err
}

// SettleAsync passes SettleAsync on to a store that has it, timed until
// done; any other store is settled on a goroutine of its own.
func (s *instrumentedStore) SettleAsync(ctx context.Context, now time.Time, b sluice.Batch, done func(error)) {
	start := time.Now()
	finish := func(err error) {
		s.m.observeStore(opSettle, start, err)
		if err == nil {
			s.closed(b.ID)
		}
		done(err)
	}
	if as, ok := s.Store.(sluice.AsyncSettler); ok {
		as.SettleAsync(ctx, now, b, finish)
		return
	}
	go func() { finish(s.Store.Settle(ctx, now, b)) }()
}

func (s *instrumentedStore) Peek(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) error {
	start := time.Now()
	err := s.Store.Peek(ctx, now, b, results)
	s.m.observeStore(opPeek, start, err)
	if dst, ok := ctx.Value(peekCaptureKey{}).(*[]sluice.CounterKey); ok {
		*dst = (*dst)[:0]
		for i := range b.Charges {
			*dst = append(*dst, b.Charges[i].Key)
		}
	}
	return err
}

func (s *instrumentedStore) Sweep(ctx context.Context, now time.Time) (sluice.SweepResult, error) {
	res, _, err := s.SweepReport(ctx, now)
	return res, err
}

// SweepReport passes on what the store's sweep settled when the store can
// tell (a sluice.SweepReporter), and nothing otherwise.
func (s *instrumentedStore) SweepReport(ctx context.Context, now time.Time) (sluice.SweepResult, []sluice.Batch, error) {
	start := time.Now()
	var res sluice.SweepResult
	var expired []sluice.Batch
	var err error
	if r, ok := s.Store.(sluice.SweepReporter); ok {
		res, expired, err = r.SweepReport(ctx, now)
	} else {
		res, err = s.Store.Sweep(ctx, now)
	}
	s.m.observeStore(opSweep, start, err)
	if err == nil {
		s.m.observeSweep(res)
		s.mu.Lock()
		for id, ob := range s.open {
			if !ob.deadline.After(now) {
				delete(s.open, id)
			}
		}
		s.mu.Unlock()
	}
	return res, expired, err
}

// renewingStore is an instrumentedStore over a sluice.LeaseRenewer: it
// renews, and keeps the renewed deadlines, so that a call longer than its
// first lease stays in flight here until settled or swept.
type renewingStore struct{ *instrumentedStore }

var _ sluice.LeaseRenewer = renewingStore{}

func (s renewingStore) RenewLeases(ctx context.Context, now time.Time, renewals []sluice.Batch) error {
	if err := s.Store.(sluice.LeaseRenewer).RenewLeases(ctx, now, renewals); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range renewals {
		if ob, ok := s.open[b.ID]; ok && b.Deadline.After(ob.deadline) {
			ob.deadline = b.Deadline
			s.open[b.ID] = ob
		}
	}
	return nil
}

func (s *instrumentedStore) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// reserved sums what open batches hold on one counter.
func (s *instrumentedStore) reserved(key sluice.CounterKey) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum int64
	for _, ob := range s.open {
		for _, c := range ob.charges {
			if c.key == key {
				sum += c.amount
			}
		}
	}
	return sum
}

// peekCaptureKey marks a context whose Peek should record the counter keys
// of its batch, in order: the admin API matches them to Limiter.Effective's
// answer to report what is reserved on each counter.
type peekCaptureKey struct{}

func withPeekCapture(ctx context.Context, dst *[]sluice.CounterKey) context.Context {
	return context.WithValue(ctx, peekCaptureKey{}, dst)
}
