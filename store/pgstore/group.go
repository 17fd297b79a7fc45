package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice"
)

// Group commit: an Admit or Settle that finds no call of this Store running
// is sent at once, alone. Otherwise it waits in the queue, and when the
// running call ends, everything queued (up to maxGroupOps) goes as the next
// call: one function call, one transaction, one commit for all of them. With
// no concurrency nothing waits; under load the round trip, the per-call CPU
// of the server and the commit's WAL flush are shared.
const (
	// maxInFlight is how many group calls of one Store run at once. One
	// makes the largest groups. Two, letting a group execute while the
	// previous one waits for its commit, measured worse on every figure
	// of BenchmarkAdmitSettle (groups of 10 instead of 16, twice the
	// server CPU per operation, 0.6x the throughput on a hot subject).
	maxInFlight = 1
	// maxGroupOps bounds one group, so that one transaction stays short.
	maxGroupOps = 64
)

const applySQL = `SELECT done, allowed, remaining, used, retry_after, reset_at
FROM sluice_apply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)`

// op is one Admit or Settle on its way through a group.
type op struct {
	settle bool
	now    time.Time
	b      sluice.Batch // the store's copy
	order  []int        // b's charges sent, in key order
	at     int          // index of order[0] among the group's charges

	admitted bool
	// results are an admission's, for its caller to copy.
	results []sluice.ChargeResult
	err     error
	done    chan struct{}
	// sent is set once the op is handed to a call to the database, after
	// which its caller cannot know whether it committed.
	sent bool
	// rec is a settlement's record, written in its transaction when the
	// settlement applies (Options.Recorder).
	rec *record
}

// queue holds the ops waiting for a call to end.
type queue struct {
	mu       sync.Mutex
	waiting  []*op
	inFlight int
}

// run sends o alone if a call slot is free, or else queues it for the next
// group and waits for that group's result or ctx.
//
// The store's timeout bounds the whole wait, in the queue and in the call:
// an op queued behind a call that the database does not answer gives up
// with it rather than one timeout later.
func (s *Store) run(ctx context.Context, o *op) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	q := &s.queue
	q.mu.Lock()
	if q.inFlight < maxInFlight {
		// With a slot free nothing is queued: a call that ends hands its
		// slot to the queue.
		q.inFlight++
		o.sent = true
		q.mu.Unlock()
		s.exec(ctx, []*op{o})
		s.next()
		return o.err
	}
	o.done = make(chan struct{})
	q.waiting = append(q.waiting, o)
	q.mu.Unlock()
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	if i := slices.Index(q.waiting, o); i >= 0 {
		// Still queued: leave, sent never.
		q.waiting = slices.Delete(q.waiting, i, i+1)
		q.mu.Unlock()
		return ctx.Err()
	}
	q.mu.Unlock()
	// Already sent: its outcome is unknown to the caller, as with any call
	// cut short (Admit then cancels it).
	return ctx.Err()
}

// next is called when a call ends: it sends what is queued as the next
// group, in the slot just freed, or frees the slot.
func (s *Store) next() {
	q := &s.queue
	q.mu.Lock()
	if len(q.waiting) == 0 {
		q.inFlight--
		q.mu.Unlock()
		return
	}
	n := min(len(q.waiting), maxGroupOps)
	g := slices.Clone(q.waiting[:n])
	q.waiting = slices.Delete(q.waiting, 0, n)
	for _, o := range g {
		o.sent = true
	}
	q.mu.Unlock()
	go func() {
		s.exec(context.Background(), g)
		for _, o := range g {
			close(o.done)
		}
		s.next()
	}()
}

// exec runs the ops of g as one call and sets each op's result. A group
// that the server refused as a whole for one op's data (an arithmetic
// overflow, say), or for the records its settlements carry, committed
// nothing, so each op is run again alone and fails or succeeds on its own.
func (s *Store) exec(ctx context.Context, g []*op) {
	if s.testHookExec != nil {
		s.testHookExec(len(g))
	}
	s.stats.calls.Add(1)
	s.stats.ops.Add(int64(len(g)))
	err := s.apply(ctx, g)
	if err == nil {
		return
	}
	var pgErr *pgconn.PgError
	var recErr *recordError
	if len(g) > 1 && (errors.As(err, &recErr) || errors.As(err, &pgErr) && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23")) {
		for _, o := range g {
			s.exec(ctx, []*op{o})
		}
		return
	}
	for _, o := range g {
		o.err = err
	}
}

// groupArgs holds one group's operations and charges as the arrays
// sluice_apply takes, and its results.
type groupArgs struct {
	now                                       []int64
	settle, row                               []bool
	batch, ttl                                []int64
	first                                     []int32
	rows                                      []int64
	kRule                                     []int64
	kSubject                                  []string
	kPeriod                                   []int64
	key                                       []int32
	kind                                      []int16
	rule                                      []int64
	subject                                   []string
	period, limit, burst, window, periodEnd   []int64
	amount, actual                            []int64
	shadow, release                           []bool
	charges                                   []*sluice.Charge
	byKey                                     []int
	done, allowed                             []bool
	remaining, used, retryAfter, resetAtNanos []int64
}

var groupPool = sync.Pool{New: func() any { return new(groupArgs) }}

// apply sends g, settlements first, as one sluice_apply call, and fills in
// every op's result.
func (s *Store) apply(ctx context.Context, g []*op) error {
	a := groupPool.Get().(*groupArgs)
	defer func() {
		a.reset() // drop the pointers to the ops' charges
		groupPool.Put(a)
	}()
	// Settlements first: the order inside a group is free, as no op of it
	// waits for another, and room freed is room an admission may take.
	slices.SortStableFunc(g, func(x, y *op) int {
		switch {
		case x.settle == y.settle:
			return 0
		case x.settle:
			return -1
		}
		return 1
	})
	for _, o := range g {
		a.add(s, o)
	}
	a.first = append(a.first, int32(len(a.kind)+1))
	a.dedupKeys()
	recorded := slices.ContainsFunc(g, func(o *op) bool { return o.rec != nil })
	err := s.call(ctx, func(ctx context.Context) error {
		if recorded {
			return s.applyRecorded(ctx, g, a)
		}
		return a.scan(s.pool.QueryRow(ctx, applySQL, a.values()...))
	})
	if err != nil {
		return err
	}
	if len(a.done) != len(g) || len(a.allowed) != len(a.kind) {
		return fmt.Errorf("sluice_apply returned %d results for %d operations and %d for %d charges",
			len(a.done), len(g), len(a.allowed), len(a.kind))
	}
	for oi, o := range g {
		o.admitted = a.done[oi]
		if o.settle {
			continue
		}
		for j, i := range o.order {
			k := o.at + j
			o.results[i] = resultOf(&o.b.Charges[i], a.allowed[k], a.remaining[k], a.used[k], a.retryAfter[k], a.resetAtNanos[k])
		}
	}
	return nil
}

// values are sluice_apply's arguments, in order.
func (a *groupArgs) values() []any {
	return []any{a.now, a.settle, a.batch, a.ttl, a.row, a.first, a.rows, a.kRule, a.kSubject, a.kPeriod,
		a.key, a.kind, a.rule, a.subject, a.period, a.limit, a.burst, a.window, a.periodEnd,
		a.amount, a.actual, a.shadow, a.release}
}

// scan reads sluice_apply's results.
func (a *groupArgs) scan(row pgx.Row) error {
	return row.Scan(&a.done, &a.allowed, &a.remaining, &a.used, &a.retryAfter, &a.resetAtNanos)
}

func (a *groupArgs) reset() {
	a.now = a.now[:0]
	a.settle, a.row = a.settle[:0], a.row[:0]
	a.batch, a.ttl, a.first, a.rows = a.batch[:0], a.ttl[:0], a.first[:0], a.rows[:0]
	a.kRule, a.kSubject, a.kPeriod = a.kRule[:0], a.kSubject[:0], a.kPeriod[:0]
	a.key, a.kind, a.rule, a.subject, a.period = a.key[:0], a.kind[:0], a.rule[:0], a.subject[:0], a.period[:0]
	a.limit, a.burst, a.window, a.periodEnd = a.limit[:0], a.burst[:0], a.window[:0], a.periodEnd[:0]
	a.amount, a.actual, a.shadow, a.release = a.amount[:0], a.actual[:0], a.shadow[:0], a.release[:0]
	clear(a.charges)
	a.charges = a.charges[:0]
}

// add appends o and its charges, in key order.
func (a *groupArgs) add(s *Store, o *op) {
	b := &o.b
	o.at = len(a.kind)
	if s.pinTime {
		a.now = append(a.now, o.now.UnixNano())
	}
	var ttl int64
	if !o.settle && !b.Deadline.IsZero() {
		ttl = int64(b.Deadline.Sub(o.now))
	}
	row := false
	for _, i := range o.order {
		if b.Charges[i].Kind == sluice.KindBudget {
			row = true
		}
	}
	key := batchKey(b.ID)
	a.settle = append(a.settle, o.settle)
	a.row = append(a.row, row)
	a.batch = append(a.batch, key)
	a.ttl = append(a.ttl, ttl)
	a.first = append(a.first, int32(len(a.kind)+1))
	if o.settle && row {
		a.rows = append(a.rows, key)
	}
	for _, i := range o.order {
		c := &b.Charges[i]
		a.charges = append(a.charges, c)
		a.kind = append(a.kind, kindOf(c.Kind))
		a.rule = append(a.rule, int64(c.Key.Rule))
		a.subject = append(a.subject, c.Key.Subject)
		a.period = append(a.period, c.Key.Period)
		limit, amount, actual := budgetFigures(c)
		a.limit = append(a.limit, limit)
		a.burst = append(a.burst, c.BurstOrLimit())
		a.window = append(a.window, int64(c.Window))
		var end int64
		if !c.PeriodEnd.IsZero() {
			end = c.PeriodEnd.UnixNano()
		}
		a.periodEnd = append(a.periodEnd, end)
		a.amount = append(a.amount, amount)
		a.actual = append(a.actual, actual)
		a.shadow = append(a.shadow, c.Shadow)
		a.release = append(a.release, c.OnExpiry == sluice.ExpiryRelease)
	}
}

// dedupKeys fills the group's distinct counter keys, sorted in the one
// order in which every transaction locks counters, and each charge's index
// among them (1-based, as SQL arrays are).
func (a *groupArgs) dedupKeys() {
	n := len(a.charges)
	a.byKey = resize(a.byKey, n)
	for i := range a.byKey {
		a.byKey[i] = i
	}
	slices.SortFunc(a.byKey, func(x, y int) int {
		kx, ky := &a.charges[x].Key, &a.charges[y].Key
		switch {
		case keyLess(kx, ky):
			return -1
		case keyLess(ky, kx):
			return 1
		}
		return 0
	})
	a.key = resize(a.key, n)
	for j, i := range a.byKey {
		k := &a.charges[i].Key
		if j == 0 || *k != a.charges[a.byKey[j-1]].Key {
			a.kRule = append(a.kRule, int64(k.Rule))
			a.kSubject = append(a.kSubject, k.Subject)
			a.kPeriod = append(a.kPeriod, k.Period)
		}
		a.key[i] = int32(len(a.kRule))
	}
}

// sortedCharges returns the indices of b's charges for which keep is true
// (all if nil), in key order.
func sortedCharges(b *sluice.Batch, keep func(c *sluice.Charge) bool) []int {
	order := make([]int, 0, len(b.Charges))
	for i := range b.Charges {
		if keep == nil || keep(&b.Charges[i]) {
			order = append(order, i)
		}
	}
	// Insertion sort: batches hold a handful of charges.
	for j := 1; j < len(order); j++ {
		for k := j; k > 0 && keyLess(&b.Charges[order[k]].Key, &b.Charges[order[k-1]].Key); k-- {
			order[k], order[k-1] = order[k-1], order[k]
		}
	}
	return order
}
