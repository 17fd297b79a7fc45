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

// charged reports whether charge c, a requests rate charge of a call in
// turn of key, is covered by an earlier call of the turn.
func (t *turns) charged(c charge, key, turn string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.seen[turnKey{c.Key, key, turn}]
	return e != nil && now.Before(e.until) && e.calls < MaxTurnCalls
}

// admitted records the requests rate charges of an admitted call of turn.
func (t *turns) admitted(cs *charges, key, turn string, now time.Time) {
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
