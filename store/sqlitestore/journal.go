package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/counter"
)

// opKind is what a journal entry records.
type opKind uint8

const (
	opAdmit  opKind = iota + 1 // a reservation with budget charges opened
	opSettle                   // a reservation settled, released or swept
	opForget                   // the recovered reservations told of (recoveredTable)
)

// op is one journal entry: a Batch from Admit, Settle or the sweep, each
// charge's Actual what a settlement charged. It points at the store's own
// copy of the batch, or, for a Settle that waits for the commit, at the
// caller's: the fields it reads no longer change while it is queued.
type op struct {
	kind  opKind
	batch *sluice.Batch
	// done, when set, is told once the op is committed, or the journal
	// failed (SettleAsync).
	done func(error)
}

func (o *op) id() uint64 { return o.batch.ID }

func (o *op) deadline() int64 { return o.batch.Deadline.UnixNano() }

// budgets calls f for each budget charge of o, and, for a settlement, its
// Actual (the settled amount). An admission's Actual is not read.
func (o *op) budgets(f func(c storedCharge, actual int64)) {
	settled := o.kind == opSettle
	for i := range o.batch.Charges {
		c := &o.batch.Charges[i]
		if c.Kind != sluice.KindBudget {
			continue
		}
		var actual int64
		if settled {
			actual = c.Actual
		}
		f(storedCharge{key: c.Key, periodEnd: c.PeriodEnd.UnixNano(), amount: c.Amount,
			release: c.OnExpiry == sluice.ExpiryRelease}, actual)
	}
}

// storedCharge is a budget charge as the reservations table keeps it: what
// the sweep needs after a restart.
type storedCharge struct {
	key       sluice.CounterKey
	periodEnd int64
	amount    int64
	release   bool
}

// encodeCharges encodes the budget charges of o.
func encodeCharges(buf []byte, o *op) []byte {
	o.budgets(func(c storedCharge, _ int64) {
		buf = binary.AppendUvarint(buf, c.key.Rule)
		buf = binary.AppendUvarint(buf, uint64(len(c.key.Subject)))
		buf = append(buf, c.key.Subject...)
		buf = binary.AppendVarint(buf, c.key.Period)
		buf = binary.AppendVarint(buf, c.periodEnd)
		buf = binary.AppendVarint(buf, c.amount)
		release := byte(0)
		if c.release {
			release = 1
		}
		buf = append(buf, release)
	})
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
		c.amount = counter.Clamp(c.amount)
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
	opened  map[uint64]*op
	closed  []uint64
	deltas  map[sluice.CounterKey]delta
	scratch []byte
	// forget deletes the recovered reservations (opForget).
	forget bool
}

func newGroup() *group {
	return &group{opened: map[uint64]*op{}, deltas: map[sluice.CounterKey]delta{}}
}

func (g *group) reset() {
	clear(g.opened)
	clear(g.deltas)
	g.closed = g.closed[:0]
	g.forget = false
}

// add folds one op into the group. A reservation opened and closed in the
// same group is never written. o must stay where it is until the group is
// committed.
func (g *group) add(o *op) {
	if o.kind == opForget {
		g.forget = true
		return
	}
	id := o.id()
	switch o.kind {
	case opAdmit:
		g.opened[id] = o
	case opSettle:
		if _, ok := g.opened[id]; ok {
			delete(g.opened, id)
		} else {
			g.closed = append(g.closed, id)
		}
		o.budgets(func(c storedCharge, actual int64) {
			d := g.deltas[c.key]
			d.periodEnd = c.periodEnd
			d.used = counter.Add(d.used, actual)
			g.deltas[c.key] = d
		})
	}
}

// leftover is a reservation's row: its id and budget charges.
type leftover struct {
	id      int64
	charges []storedCharge
}

// readCharges reads the rows of query, which selects a reservation's id
// and its encoded charges.
func readCharges(ctx context.Context, tx *sql.Tx, query string) ([]leftover, error) {
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []leftover
	for rows.Next() {
		var lo leftover
		var blob []byte
		if err := rows.Scan(&lo.id, &blob); err != nil {
			return nil, err
		}
		if lo.charges, err = decodeCharges(blob); err != nil {
			return nil, fmt.Errorf("reservation %d: %w", lo.id, err)
		}
		out = append(out, lo)
	}
	return out, rows.Err()
}
