package redisstore

import (
	"encoding/binary"

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
