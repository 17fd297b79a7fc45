package sluice

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// waitQueues keeps the admissions waiting for a rate or concurrency rule,
// one first-in first-out queue per counter, so that waiters on one subject
// are served in arrival order. A waiter is a channel closed when it
// reaches the front of its queue.
type waitQueues struct {
	count  atomic.Int64
	mu     sync.Mutex
	queues map[CounterKey][]chan struct{}
	// wake is closed (and replaced) when a settlement may have freed room.
	wake chan struct{}
}

func (w *waitQueues) active() bool { return w.count.Load() > 0 }

// existing returns the key of a queue that one of charges would join.
func (w *waitQueues) existing(charges []Charge) (CounterKey, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range charges {
		if key := charges[i].Key; charges[i].Kind != KindBudget && len(w.queues[key]) > 0 {
			return key, true
		}
	}
	return CounterKey{}, false
}

func (w *waitQueues) join(key CounterKey) chan struct{} {
	me := make(chan struct{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queues == nil {
		w.queues = map[CounterKey][]chan struct{}{}
	}
	q := append(w.queues[key], me)
	w.queues[key] = q
	if len(q) == 1 {
		close(me)
	}
	w.count.Add(1)
	return me
}

func (w *waitQueues) leave(key CounterKey, me chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[key]
	for i, x := range q {
		if x != me {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if i == 0 && len(q) > 0 {
			close(q[0])
		}
		break
	}
	if len(q) == 0 {
		delete(w.queues, key)
	} else {
		w.queues[key] = q
	}
	w.count.Add(-1)
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
func decidingKey(charges []Charge) CounterKey {
	var key CounterKey
	var longest time.Duration = -1
	for i := range charges {
		c := &charges[i]
		if !c.Allowed && !c.Shadow && c.Kind != KindBudget && c.RetryAfter > longest {
			key, longest = c.Key, c.RetryAfter
		}
	}
	return key
}

// wait queues the admission behind the earlier waiters on key and retries
// it, as the head of the queue, until it is admitted, refused for good, or
// out of time.
func (l *Limiter) wait(ctx context.Context, req *Request, r *Reservation, key CounterKey, start time.Time) (*Reservation, error) {
	deadline := start.Add(req.MaxWait)
	me := l.waiters.join(key)
	defer l.waiters.leave(key, me)
	fail := func(err error) (*Reservation, error) {
		l.refused.Add(1)
		return nil, err
	}
	select {
	case <-me:
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-l.clock.After(deadline.Sub(start)):
		// Out of time behind others: one last attempt decides.
	}
	for {
		wake := l.waiters.wakeChan()
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
