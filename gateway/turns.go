package gateway

import (
	"sync"
	"time"
)

// HeaderTurn groups the calls of one turn (an agent's steps answering one
// message): a rate rule counting requests charges the turn once per key
// within its window; token, cost and budget rules charge every call.
const HeaderTurn = "X-Sluice-Turn"

// maxTurnID bounds a turn id; a longer one is ignored.
const maxTurnID = 128

// turnTTL is how long a turn's first call is remembered: longer than any
// requests rule's window a turn is meant to span.
const turnTTL = time.Hour

// maxTurns bounds the turns remembered; past it the expired are dropped,
// and if none is, all of them (their next calls are then charged anew).
const maxTurns = 100_000

// turns remembers, per key and turn id, when the turn's first call was
// admitted. It is per replica: with several replicas a turn whose calls
// reach two of them is charged once on each. The zero value is ready.
type turns struct {
	mu      sync.Mutex
	started map[string]time.Time
}

func turnKey(keyID, turn string) string { return keyID + "\x1f" + turn }

// startedAt returns when the turn's first call was admitted, or zero.
func (t *turns) startedAt(keyID, turn string, now time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.started[turnKey(keyID, turn)]
	if !ok || now.Sub(at) >= turnTTL {
		return time.Time{}
	}
	return at
}

// start records the turn's first admitted call at now.
func (t *turns) start(keyID, turn string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started == nil {
		t.started = map[string]time.Time{}
	}
	if len(t.started) >= maxTurns {
		for k, at := range t.started {
			if now.Sub(at) >= turnTTL {
				delete(t.started, k)
			}
		}
		if len(t.started) >= maxTurns {
			clear(t.started)
		}
	}
	k := turnKey(keyID, turn)
	if _, ok := t.started[k]; !ok {
		t.started[k] = now
	}
}
