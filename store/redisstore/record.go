package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
)

// record encodes the reservation record of a group: what the sweep needs to
// settle it (the lease member, whether it counts as the batch's
// reservation, and per budget charge or lease its kind, key, amount, expiry
// policy and period end), in MessagePack for the scripts' cmsgpack. The
// same batch always encodes to the same bytes, so that Settle names the
// record Admit wrote.
func (s *Store) record(b *sluice.Batch, p *plan, g *group) string {
	n := 2
	for _, i := range g.idx {
		if b.Charges[i].Kind != sluice.KindRate {
			n += 5
		}
	}
	buf := make([]byte, 0, 64+48*n)
	buf = mpArray(buf, n)
	buf = mpString(buf, p.member)
	counts := int64(0)
	if g.counts {
		counts = 1
	}
	buf = mpInt(buf, counts)
	for _, i := range g.idx {
		c := &b.Charges[i]
		switch c.Kind {
		case sluice.KindBudget:
			release := int64(0)
			if c.OnExpiry == sluice.ExpiryRelease {
				release = 1
			}
			buf = mpInt(buf, 2)
			buf = mpString(buf, p.keys[i])
			buf = mpInt(buf, c.Amount)
			buf = mpInt(buf, release)
			buf = mpInt(buf, ceilMicro(c.PeriodEnd))
		case sluice.KindConcurrency:
			buf = mpInt(buf, 3)
			buf = mpString(buf, p.keys[i])
			buf = mpInt(buf, 0)
			buf = mpInt(buf, 0)
			buf = mpInt(buf, 0)
		}
	}
	return string(buf)
}

func mpArray(buf []byte, n int) []byte {
	if n < 16 {
		return append(buf, 0x90|byte(n))
	}
	return binary.BigEndian.AppendUint16(append(buf, 0xdc), uint16(n))
}

func mpString(buf []byte, s string) []byte {
	if len(s) < 1<<16 {
		buf = binary.BigEndian.AppendUint16(append(buf, 0xda), uint16(len(s)))
	} else {
		buf = binary.BigEndian.AppendUint32(append(buf, 0xdb), uint32(len(s)))
	}
	return append(buf, s...)
}

func mpInt(buf []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(append(buf, 0xd3), uint64(v))
}

// parseRecord reads back a record that record wrote: the batch's lease
// member, and its budget charges and leases (a lease holds 1).
func (s *Store) parseRecord(rec string) (member string, charges []sluice.Charge, err error) {
	r := mpReader{b: []byte(rec)}
	n := r.array()
	member = r.str()
	r.num() // whether it counts as the batch's reservation
	if r.err == nil && (n < 2 || (n-2)%5 != 0) {
		r.err = fmt.Errorf("%d fields", n)
	}
	for j := 2; j < n && r.err == nil; j += 5 {
		kind, key, amount := r.num(), r.str(), r.num()
		r.num() // expiry policy
		r.num() // period end
		if r.err != nil {
			break
		}
		ck, k, ok := s.parseCounterKey(key)
		switch {
		case !ok:
			r.err = fmt.Errorf("key %q not of this store", key)
		case kind == 2 && k == sluice.KindBudget:
			charges = append(charges, sluice.Charge{Key: ck, Kind: k, Amount: amount})
		case kind == 3 && k == sluice.KindConcurrency:
			charges = append(charges, sluice.Charge{Key: ck, Kind: k, Amount: 1})
		default:
			r.err = fmt.Errorf("charge of kind %d on key %q", kind, key)
		}
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes past its end", len(r.b))
	}
	if r.err == nil && len(member) != 16 {
		r.err = fmt.Errorf("member of %d bytes", len(member))
	}
	if r.err != nil {
		return "", nil, fmt.Errorf("reservation record: %w", r.err)
	}
	return member, charges, nil
}

// memberID is the batch ID a member names (see Store.member).
func memberID(member string) uint64 {
	return binary.LittleEndian.Uint64([]byte(member[8:16]))
}

// mpReader reads the MessagePack forms that mpArray, mpString and mpInt
// write; the first error sticks.
type mpReader struct {
	b   []byte
	err error
}

func (r *mpReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = errors.New("truncated")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *mpReader) array() int {
	t := r.take(1)
	switch {
	case t == nil:
		return 0
	case t[0]&0xf0 == 0x90:
		return int(t[0] & 0x0f)
	case t[0] == 0xdc:
		if v := r.take(2); v != nil {
			return int(binary.BigEndian.Uint16(v))
		}
		return 0
	}
	r.err = fmt.Errorf("type 0x%02x, want an array", t[0])
	return 0
}

func (r *mpReader) str() string {
	t := r.take(1)
	var n int
	switch {
	case t == nil:
		return ""
	case t[0] == 0xda:
		if v := r.take(2); v != nil {
			n = int(binary.BigEndian.Uint16(v))
		}
	case t[0] == 0xdb:
		if v := r.take(4); v != nil {
			n = int(binary.BigEndian.Uint32(v))
		}
	default:
		r.err = fmt.Errorf("type 0x%02x, want a string", t[0])
	}
	return string(r.take(n))
}

func (r *mpReader) num() int64 {
	t := r.take(1)
	if t != nil && t[0] != 0xd3 {
		r.err = fmt.Errorf("type 0x%02x, want an int64", t[0])
	}
	if v := r.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}
