package sluice

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// installWaiting lets a Limiter's admissions wait (Request.MaxWait) on
// fair queues of its own, woken when a settlement or a sweep may have
// freed room.
func installWaiting(l *Limiter, _ *Options) {
	w := &waitQueues{}
	l.hooks.wait = func(ctx context.Context, req Request, r *Reservation, now time.Time) (*Reservation, error) {
		return l.admitWaiting(ctx, w, &req, r, now)
	}
	l.hooks.settled = append(l.hooks.settled, func(*Reservation) { w.notify() })
	l.hooks.swept = append(l.hooks.swept, func(res SweepResult) {
		if res.Reservations > 0 {
			w.notify()
		}
	})
}

// admitWaiting admits req, whose MaxWait is positive: behind the waiters
// of a queue one of its charges would join, else at once, and waiting
// when refused by a rate or concurrency rule it may wait for.
func (l *Limiter) admitWaiting(ctx context.Context, w *waitQueues, req *Request, r *Reservation, now time.Time) (*Reservation, error) {
	if w.active() {
		if key, ok := w.existing(&r.charges); ok {
			return l.wait(ctx, w, req, r, key, now)
		}
	}
	err := l.try(ctx, req, r, now)
	if err == nil {
		return r, nil
	}
	if waitable(err, req.MaxWait) {
		return l.wait(ctx, w, req, r, decidingKey(&r.charges), now)
	}
	l.refused.Add(1)
	return nil, err
}

// waitQueues keeps the admissions waiting for a rate or concurrency rule,
// one fair queue per counter. A waiter is a channel closed when its turn
// comes: one waiter per counter tries at a time, and the others wait for it
// to be admitted, refused or out of time.
type waitQueues struct {
	count  atomic.Int64
	mu     sync.Mutex
	queues map[CounterKey]*fairQueue
	// wake is closed (and replaced) when a settlement may have freed room.
	wake chan struct{}
}

// fairQueue is the waiters on one counter, grouped in flows: the waiters of
// one tenant (a workspace; a key, or an address, for requests without
// one). A flow's waiters are served in arrival order, and the flows by
// deficit round robin: each flow's turn adds a quantum to its deficit,
// and its waiters are served while the deficit covers their cost (the
// amount they charge this counter: 1 for a request or a call in flight, the
// tokens for a token rate). So a tenant with many waiters never holds back
// another's one, and a tenant of small calls is not held back by another's
// large ones.
type fairQueue struct {
	flows map[string]*flow
	// ring holds the flows with waiters in their order of service; the
	// turn is ring[0]'s.
	ring []*flow
	// head is the waiter whose turn it is, nil while none is.
	head *waiter
}

type flow struct {
	name    string
	waiters []*waiter
	deficit int64
}

type waiter struct {
	turn chan struct{}
	flow *flow
	cost int64
}

func (w *waitQueues) active() bool { return w.count.Load() > 0 }

// existing returns the key of a queue that one of charges would join.
func (w *waitQueues) existing(cs *charges) (CounterKey, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range cs.in {
		if c.Kind != KindBudget && w.queues[c.Key] != nil {
			return c.Key, true
		}
	}
	return CounterKey{}, false
}

// join queues a waiter of flow name costing cost on key.
func (w *waitQueues) join(key CounterKey, name string, cost int64) *waiter {
	me := &waiter{turn: make(chan struct{}), cost: max(cost, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queues == nil {
		w.queues = map[CounterKey]*fairQueue{}
	}
	q := w.queues[key]
	if q == nil {
		q = &fairQueue{flows: map[string]*flow{}}
		w.queues[key] = q
	}
	f := q.flows[name]
	if f == nil {
		f = &flow{name: name}
		q.flows[name] = f
		q.ring = append(q.ring, f)
	}
	me.flow = f
	f.waiters = append(f.waiters, me)
	if len(q.ring) == 1 && len(f.waiters) == 1 {
		f.deficit = q.quantum() // the only flow: its turn begins
	}
	if q.head == nil {
		q.next()
	}
	w.count.Add(1)
	return me
}

// leave takes me out of key's queue, and gives the turn on when it was
// me's.
func (w *waitQueues) leave(key CounterKey, me *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[key]
	f := me.flow
	for i, x := range f.waiters {
		if x == me {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			break
		}
	}
	if len(f.waiters) == 0 {
		delete(q.flows, f.name)
		for i, x := range q.ring {
			if x == f {
				q.ring = append(q.ring[:i], q.ring[i+1:]...)
				if i == 0 && len(q.ring) > 0 {
					q.ring[0].deficit += q.quantum()
				}
				break
			}
		}
	}
	if q.head == me {
		q.head = nil
		q.next()
	}
	if len(q.ring) == 0 {
		delete(w.queues, key)
	}
	w.count.Add(-1)
}

// next gives the turn to the next waiter by deficit round robin.
func (q *fairQueue) next() {
	if len(q.ring) == 0 {
		return
	}
	quantum := q.quantum()
	for {
		f := q.ring[0]
		if w := f.waiters[0]; f.deficit >= w.cost {
			f.deficit -= w.cost
			q.head = w
			close(w.turn)
			return
		}
		// f's turn is over; the next flow's begins.
		q.ring = append(q.ring[1:], f)
		q.ring[0].deficit += quantum
	}
}

// quantum is the largest cost at the front of a flow, so that every turn
// serves at least one waiter.
func (q *fairQueue) quantum() int64 {
	var m int64 = 1
	for _, f := range q.ring {
		m = max(m, f.waiters[0].cost)
	}
	return m
}

func (w *waitQueues) wakeChan() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wake == nil {
		w.wake = make(chan struct{})
	}
	return w.wake
}

// notify wakes the waiters after room may have been freed.
func (w *waitQueues) notify() {
	if !w.active() {
		return
	}
	w.mu.Lock()
	if w.wake != nil {
		close(w.wake)
		w.wake = nil
	}
	w.mu.Unlock()
}

// flow names the tenant whose waiters are queued together: the workspace
// (within its org), else the key, else the address.
func (id *Identity) flow() string {
	switch {
	case id.Workspace != "":
		return "w" + id.qualifiedValue(id.Workspace)
	case id.Key != "":
		return "k" + id.Key
	}
	return "i" + id.IP
}

// waitable reports whether err is a refusal worth waiting for with remaining
// time left.
func waitable(err error, remaining time.Duration) bool {
	if remaining <= 0 {
		return false
	}
	var rate *RateLimitError
	if errors.As(err, &rate) {
		return rate.RetryAfter <= remaining
	}
	return errors.Is(err, ErrBusy)
}

// decidingKey returns the counter of the rate or concurrency charge that
// refused with the longest wait.
func decidingKey(cs *charges) CounterKey {
	var key CounterKey
	var longest time.Duration = -1
	for i := range cs.in {
		c := cs.at(i)
		if !c.Allowed && !c.Shadow && c.Kind != KindBudget && c.RetryAfter > longest {
			key, longest = c.Key, c.RetryAfter
		}
	}
	return key
}

// wait queues the admission on key's fair queue and retries it, when its
// turn comes, until it is admitted, refused for good, or out of time.
func (l *Limiter) wait(ctx context.Context, w *waitQueues, req *Request, r *Reservation, key CounterKey, start time.Time) (*Reservation, error) {
	deadline := start.Add(req.MaxWait)
	var cost int64
	for _, c := range r.charges.in {
		if c.Key == key {
			cost = c.Amount
		}
	}
	me := w.join(key, req.Identity.flow(), cost)
	defer w.leave(key, me)
	fail := func(err error) (*Reservation, error) {
		l.refused.Add(1)
		return nil, err
	}
	select {
	case <-me.turn:
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-l.clock.After(deadline.Sub(start)):
		// Out of time behind others: one last attempt decides.
	}
	for {
		wake := w.wakeChan()
		now := l.clock.Now()
		if err := l.build(l.policy.Load(), req, now, r, true); err != nil {
			return fail(err)
		}
		err := l.try(ctx, req, r, now)
		if err == nil {
			return r, nil
		}
		remaining := deadline.Sub(now)
		if !waitable(err, remaining) {
			return fail(err)
		}
		var pause time.Duration
		var rate *RateLimitError
		var busy *BusyError
		switch {
		case errors.As(err, &rate):
			pause = rate.RetryAfter
		case errors.As(err, &busy):
			pause = min(busy.RetryAfter, remaining)
		}
		select {
		case <-l.clock.After(pause):
		case <-wake:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
}
