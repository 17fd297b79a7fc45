package sluice

import (
	"sync"
	"time"
)

// MaxTurnCalls is how many calls of one turn (Request.Turn) a requests
// rate rule counts as one; the next call of the turn is charged afresh.
const MaxTurnCalls = 64

// maxTurns bounds the turns a Limiter remembers; past it, a new turn is
// not remembered, and each of its calls is charged.
const maxTurns = 100_000

// installTurns gives a Limiter its memory of turns (Request.Turn).
func installTurns(l *Limiter, _ *Options) {
	t := &turns{}
	l.hooks.charging = append(l.hooks.charging, t.charging)
	l.hooks.admitted = append(l.hooks.admitted, t.admitted)
}

// turns remembers, per requests rate rule and counter, the turns already
// charged within the rule's window, so that the later calls of a turn are
// charged nothing by that rule. It is the Limiter's own memory: a turn
// whose calls reach several replicas is charged at most once by each.
type turns struct {
	mu   sync.Mutex
	seen map[turnKey]*turnEntry
}

type turnKey struct {
	counter CounterKey
	key     string // the API key, so one key's turn ids are not another's
	turn    string
}

type turnEntry struct {
	until time.Time
	calls int
}

// charging charges nothing for c, a charge of a call in turn of key, when
// it is a requests rate charge covered by an earlier call of the turn.
func (t *turns) charging(c charge, key, turn string, now time.Time) {
	if turn == "" || !turnCounted(c) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.seen[turnKey{c.Key, key, turn}]
	if e != nil && now.Before(e.until) && e.calls < MaxTurnCalls {
		c.Amount = 0
	}
}

// admitted records the requests rate charges of r, an admitted call of
// turn of key.
func (t *turns) admitted(r *Reservation, key, turn string, now time.Time) {
	if turn == "" {
		return
	}
	cs := &r.charges
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range cs.in {
		c := cs.at(i)
		if !turnCounted(c) {
			continue
		}
		k := turnKey{c.Key, key, turn}
		if e := t.seen[k]; e != nil && now.Before(e.until) && e.calls < MaxTurnCalls {
			e.calls++
			continue
		}
		if t.seen == nil {
			t.seen = map[turnKey]*turnEntry{}
		}
		if len(t.seen) >= maxTurns {
			for k, e := range t.seen {
				if !now.Before(e.until) {
					delete(t.seen, k)
				}
			}
			if len(t.seen) >= maxTurns {
				continue
			}
		}
		t.seen[k] = &turnEntry{until: now.Add(c.Window), calls: 1}
	}
}

// turnCounted reports whether c is charged once per turn: a requests rate
// charge.
func turnCounted(c charge) bool {
	return c.Kind == KindRate && c.rule.metric == MetricRequests
}
