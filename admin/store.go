package admin

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/inproc"
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
	_ sluice.Store        = (*instrumentedStore)(nil)
	_ sluice.AsyncSettler = (*instrumentedStore)(nil)
)

// openBatch is an admitted batch: its charges copied from a Batch, or the
// engine's own admission, read in place when asked.
type openBatch struct {
	admitted time.Time
	deadline time.Time
	charges  []openCharge
	adm      *inproc.Admission
}

type openCharge struct {
	key    sluice.CounterKey
	kind   sluice.Kind
	amount int64
}

// eachCharge calls f for each charge of ob.
func (ob *openBatch) eachCharge(f func(openCharge)) {
	if a := ob.adm; a != nil {
		for i := range a.Charges {
			// Field by field: the engine may be writing Actual.
			ch := &a.Charges[i]
			f(openCharge{key: sluice.CounterKey{Rule: ch.Rule, Subject: a.SubjectOf(ch), Period: ch.Period},
				kind: sluice.Kind(ch.Kind.String()), amount: ch.Amount})
		}
		return
	}
	for _, c := range ob.charges {
		f(c)
	}
}

func (s *instrumentedStore) Admit(ctx context.Context, now time.Time, b *sluice.Batch) (bool, error) {
	start := time.Now()
	ok, err := s.Store.Admit(ctx, now, b)
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

func (s *instrumentedStore) Settle(ctx context.Context, now time.Time, b *sluice.Batch) error {
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
func (s *instrumentedStore) SettleAsync(ctx context.Context, now time.Time, b *sluice.Batch, done func(error)) {
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

// localStore is a store the engine reads its charges in place through
// (memstore, sqlitestore): the methods the Limiter looks for.
type localStore interface {
	sluice.Store
	AdmitLocal(now int64, a *inproc.Admission) (bool, error)
	SettleLocal(ctx context.Context, now int64, a *inproc.Admission) error
	LocalStore() sluice.Store
}

type localAsyncSettler interface {
	SettleLocalAsync(now int64, a *inproc.Admission, done func(error))
}

// instrumentedLocal is an instrumentedStore over a localStore that keeps
// the engine's in-place path: no Batch is built, and an open admission is
// remembered by pointer, not copied.
type instrumentedLocal struct {
	*instrumentedStore
	local localStore
}

// AdmitLocal times the inner store's AdmitLocal and remembers the
// admission while it is open.
func (s *instrumentedLocal) AdmitLocal(now int64, a *inproc.Admission) (bool, error) {
	start := time.Now()
	ok, err := s.local.AdmitLocal(now, a)
	s.m.observeStore(opAdmit, start, err)
	if ok && err == nil {
		s.opened(a.ID, openBatch{admitted: time.Unix(0, now), deadline: time.Unix(0, a.Deadline), adm: a})
	}
	return ok, err
}

// SettleLocal times the inner store's SettleLocal.
func (s *instrumentedLocal) SettleLocal(ctx context.Context, now int64, a *inproc.Admission) error {
	start := time.Now()
	err := s.local.SettleLocal(ctx, now, a)
	s.m.observeStore(opSettle, start, err)
	if err == nil {
		s.closed(a.ID)
	}
	return err
}

// SettleLocalAsync is SettleLocal for a caller that does not wait, timed
// until done.
func (s *instrumentedLocal) SettleLocalAsync(now int64, a *inproc.Admission, done func(error)) {
	as, ok := s.local.(localAsyncSettler)
	if !ok {
		done(s.SettleLocal(context.Background(), now, a))
		return
	}
	start := time.Now()
	as.SettleLocalAsync(now, a, func(err error) {
		s.m.observeStore(opSettle, start, err)
		if err == nil {
			s.closed(a.ID)
		}
		done(err)
	})
}

// LocalStore returns s: the engine reads charges in place through s.
func (s *instrumentedLocal) LocalStore() sluice.Store { return s }

func (s *instrumentedStore) Peek(ctx context.Context, now time.Time, b *sluice.Batch) error {
	start := time.Now()
	err := s.Store.Peek(ctx, now, b)
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
	start := time.Now()
	res, err := s.Store.Sweep(ctx, now)
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
	return res, err
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
		ob.eachCharge(func(c openCharge) {
			if c.key == key {
				sum += c.amount
			}
		})
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

// Reservation is a reservation open in this process: admitted, not yet
// settled or swept.
type Reservation struct {
	ID       uint64    `json:"id"`
	Admitted time.Time `json:"admitted"`
	Deadline time.Time `json:"deadline"`
	// Age is how long it has been open, in seconds.
	Age     float64             `json:"age_seconds"`
	Charges []ReservationCharge `json:"charges"`
}

// ReservationCharge is one counter a reservation holds an amount on.
type ReservationCharge struct {
	Kind sluice.Kind `json:"kind"`
	// Subject is the counter's subject value (parts of a composite joined
	// by "+").
	Subject string `json:"subject"`
	Amount  int64  `json:"amount"`
}

// OpenReservations lists the reservations open in this process at now,
// oldest first.
func (m *Metrics) OpenReservations(now time.Time) []Reservation {
	out := []Reservation{}
	for _, s := range m.storesSnapshot() {
		s.mu.Lock()
		for id, ob := range s.open {
			r := Reservation{ID: id, Admitted: ob.admitted.UTC(), Deadline: ob.deadline.UTC(), Age: now.Sub(ob.admitted).Seconds()}
			ob.eachCharge(func(c openCharge) {
				r.Charges = append(r.Charges, ReservationCharge{Kind: c.kind, Subject: displaySubject(c.key.Subject), Amount: c.amount})
			})
			out = append(out, r)
		}
		s.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Reservation) int { return a.Admitted.Compare(b.Admitted) })
	return out
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
