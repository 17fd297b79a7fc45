package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"
)

// Operation types of the ops script.
const (
	opAdmit  byte = 1
	opCheck  byte = 2
	opPeek   byte = 3
	opSettle byte = 4
	opCancel byte = 5
)

// resultLate is the result of an admission that reached the server after
// its give-up time, and of a cancellation that came before it.
const resultLate = "\x02"

// maxBatch is the most operations one ops script applies; maxInFlight is
// the most batches of one lane in flight at once (two, so that the server
// works on one batch while the callers of the previous one prepare the
// next).
const (
	maxBatch    = 64
	maxInFlight = 2
)

// op is one operation on one slot: its keys and arguments, encoded by the
// caller, and its result, filled by the lane. The lane never touches the
// caller's batch, so a caller that gave up leaves nothing behind.
type op struct {
	typ  byte
	keys []string
	// blob is the operation, packed (see ops.lua), key references being
	// 1-based indexes into keys; n is its number of charges.
	blob []byte
	n    int
	// pinned is the caller's now (µs) with PinTime.
	pinned int64
	done   chan struct{}
	sent   bool // guarded by the lane's mutex

	// now is the script's now (µs), real the server's own TIME (µs).
	now, real int64
	result    string
	err       error
}

// lane sends the operations of one slot in batches: while batches are in
// flight the next operations wait and then go together (a group commit).
// An idle lane has no goroutine.
type lane struct {
	mu      sync.Mutex
	pending []*op
	running int
	// clock bounds how far the slot's server clock is ahead of ours.
	clock clockOffset
}

// lanes are the Store's lanes, one per slot (one on a standalone server).
type lanes []lane

// timers are reusable timers for do (a stopped timer's channel holds no
// stale tick since Go 1.23).
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// do sends o through the lane of slot and waits for its result, for ctx or
// for deadline. An operation still waiting then is withdrawn; one already
// sent may have been applied.
func (s *Store) do(ctx context.Context, deadline time.Time, slot int, o *op) error {
	o.done = make(chan struct{})
	l := &s.lanes[slot]
	l.mu.Lock()
	l.pending = append(l.pending, o)
	if l.running < maxInFlight {
		l.running++
		go s.run(l)
	}
	l.mu.Unlock()
	t := timers.Get().(*time.Timer)
	t.Reset(time.Until(deadline))
	defer func() {
		t.Stop()
		timers.Put(t)
	}()
	var err error
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = context.DeadlineExceeded
	}
	l.mu.Lock()
	if !o.sent {
		for i, p := range l.pending {
			if p == o {
				l.pending = append(l.pending[:i], l.pending[i+1:]...)
				break
			}
		}
	}
	l.mu.Unlock()
	return err
}

// run sends the lane's pending operations until there are none.
func (s *Store) run(l *lane) {
	for {
		// Let the callers that are about to send join this batch: larger
		// batches cost Redis less per operation.
		runtime.Gosched()
		l.mu.Lock()
		n := min(len(l.pending), maxBatch)
		if n == 0 {
			l.running--
			l.mu.Unlock()
			return
		}
		batch := make([]*op, n)
		copy(batch, l.pending)
		rest := copy(l.pending, l.pending[n:])
		clear(l.pending[rest:])
		l.pending = l.pending[:rest]
		for _, o := range batch {
			o.sent = true
		}
		l.mu.Unlock()
		s.exec(l, batch)
		for _, o := range batch {
			close(o.done)
		}
	}
}

// exec runs one ops script for a batch of l and hands each operation its
// result.
func (s *Store) exec(l *lane, batch []*op) {
	keys := make([]string, 0, 8)
	index := make(map[string]int, 8)
	args := make([]string, 0, 3)
	// The second argument gives each operation's number of charges, two
	// bytes each, so that the script reads them with one call.
	counts := make([]byte, 0, 2*len(batch))
	for _, o := range batch {
		counts = binary.LittleEndian.AppendUint16(counts, uint16(o.n))
	}
	size := 0
	for _, o := range batch {
		rebase(o.blob, o.n, o.keys, &keys, index)
		size += len(o.blob)
	}
	ops := make([]byte, 0, size)
	for _, o := range batch {
		ops = append(ops, o.blob...)
	}
	args = append(args, s.batchNow(batch), unsafeString(counts), unsafeString(ops))
	ctx, cancel := s.call(context.Background())
	defer cancel()
	sent := time.Now()
	reply, err := opsScript.Exec(ctx, s.client, keys, args).ToArray()
	if err == nil && len(reply) < len(batch)+2 {
		err = fmt.Errorf("ops script returned %d values for %d operations", len(reply), len(batch))
	}
	var now, real int64
	if err == nil {
		now, err = reply[0].AsInt64()
	}
	if err == nil {
		real, err = reply[1].AsInt64()
	}
	if err != nil {
		for _, o := range batch {
			o.err = err
		}
		return
	}
	s.logRepaired(reply[len(batch)+2:])
	arrived := time.Now()
	l.clock.observe(real, sent, arrived)
	s.clock.observe(real, sent, arrived)
	for i, o := range batch {
		o.now, o.real = now, real
		o.result, o.err = reply[i+2].ToString()
		if o.typ == opAdmit && o.result == resultLate {
			s.late.Add(1)
		}
	}
}

// batchNow is the time argument of a batch: with PinTime, the latest time a
// caller passed (a batch runs at one instant, and stored time never moves
// backwards); otherwise empty, for the server's TIME.
func (s *Store) batchNow(batch []*op) string {
	if !s.pinTime {
		return ""
	}
	var latest int64
	for _, o := range batch {
		latest = max(latest, o.pinned)
	}
	return strconv.FormatInt(latest, 10)
}

// unsafeString views b as a string; b is not modified afterwards.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
