package sqlitestore

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/sluicehq/sluice"
)

// opKind is what a journal entry records.
type opKind uint8

const (
	opAdmit  opKind = iota + 1 // a reservation with budget charges opened
	opSettle                   // a reservation settled, released or swept
)

// op is one journal entry. It points at the batch rather than copying it:
// the fields it reads (keys, amounts, deadline, and Actual once settled)
// no longer change after the store call that queued it.
type op struct {
	kind  opKind
	batch *sluice.Batch
	// actual overrides the batch's Actual amounts (the sweep's decision).
	actual []int64
	// done, when set, is told once the op is committed, or the journal
	// failed (SettleAsync).
	done func(error)
}

func (o *op) actualOf(i int) int64 {
	if o.actual != nil {
		return o.actual[i]
	}
	return o.batch.Charges[i].Actual
}

// storedCharge is a budget charge as the reservations table keeps it: what
// the sweep needs after a restart.
type storedCharge struct {
	key       sluice.CounterKey
	periodEnd int64
	amount    int64
	release   bool
}

// encodeCharges encodes the budget charges of b.
func encodeCharges(buf []byte, b *sluice.Batch) []byte {
	for i := range b.Charges {
		c := &b.Charges[i]
		if c.Kind != sluice.KindBudget {
			continue
		}
		buf = binary.AppendUvarint(buf, c.Key.Rule)
		buf = binary.AppendUvarint(buf, uint64(len(c.Key.Subject)))
		buf = append(buf, c.Key.Subject...)
		buf = binary.AppendVarint(buf, c.Key.Period)
		buf = binary.AppendVarint(buf, c.PeriodEnd.UnixNano())
		buf = binary.AppendVarint(buf, c.Amount)
		release := byte(0)
		if c.OnExpiry == sluice.ExpiryRelease {
			release = 1
		}
		buf = append(buf, release)
	}
	return buf
}

var errCorrupt = errors.New("corrupt reservation record")

func decodeCharges(buf []byte) ([]storedCharge, error) {
	var out []storedCharge
	for len(buf) > 0 {
		var c storedCharge
		var n int
		if c.key.Rule, n = binary.Uvarint(buf); n <= 0 {
			return nil, errCorrupt
		}
		buf = buf[n:]
		l, n := binary.Uvarint(buf)
		if n <= 0 || uint64(len(buf)-n) < l {
			return nil, errCorrupt
		}
		c.key.Subject = string(buf[n : n+int(l)])
		buf = buf[n+int(l):]
		for _, dst := range []*int64{&c.key.Period, &c.periodEnd, &c.amount} {
			if *dst, n = binary.Varint(buf); n <= 0 {
				return nil, errCorrupt
			}
			buf = buf[n:]
		}
		if len(buf) < 1 {
			return nil, errCorrupt
		}
		c.release = buf[0] == 1
		buf = buf[1:]
		out = append(out, c)
	}
	return out, nil
}

// delta is a change to one budget counter's settled usage.
type delta struct {
	periodEnd int64
	used      int64
}

// group is what one journal transaction writes: reservations opened and
// closed, and the net change of each budget counter.
type group struct {
	opened  map[uint64]*sluice.Batch
	closed  []uint64
	deltas  map[sluice.CounterKey]delta
	scratch []byte
}

func newGroup() *group {
	return &group{opened: map[uint64]*sluice.Batch{}, deltas: map[sluice.CounterKey]delta{}}
}

func (g *group) reset() {
	clear(g.opened)
	clear(g.deltas)
	g.closed = g.closed[:0]
}

// add folds one op into the group. A reservation opened and closed in the
// same group is never written.
func (g *group) add(o *op) {
	switch o.kind {
	case opAdmit:
		g.opened[o.batch.ID] = o.batch
	case opSettle:
		if _, ok := g.opened[o.batch.ID]; ok {
			delete(g.opened, o.batch.ID)
		} else {
			g.closed = append(g.closed, o.batch.ID)
		}
		for i := range o.batch.Charges {
			c := &o.batch.Charges[i]
			if c.Kind != sluice.KindBudget {
				continue
			}
			d := g.deltas[c.Key]
			d.periodEnd = c.PeriodEnd.UnixNano()
			d.used += o.actualOf(i)
			g.deltas[c.Key] = d
		}
	}
}

func unixNano(t time.Time) int64 { return t.UnixNano() }
