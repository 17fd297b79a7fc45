package redisstore

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// maxCharges is the most charges one group may hold (the ops script's
// encoding).
const maxCharges = 1 << 14

// opBlob encodes one operation for the ops script (see ops.lua for the
// layout): le is little-endian throughout.
func opBlob(typ byte, deadline time.Time, dueRef int, member, rec string, n int) []byte {
	dl := ceilMicro(deadline)
	buf := make([]byte, 0, 32+len(member)+len(rec)+43*n)
	buf = append(buf, typ)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(dl))
	buf = append(buf, 0)
	mark := len(buf)
	buf = strconv.AppendInt(buf, dl, 10)
	buf[mark-1] = byte(len(buf) - mark)
	buf = binary.LittleEndian.AppendUint16(buf, uint16(dueRef))
	buf = binary.LittleEndian.AppendUint16(buf, uint16(n))
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(member)))
	buf = append(buf, member...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(rec)))
	return append(buf, rec...)
}

// appendCharge encodes one charge of an operation.
func appendCharge(buf []byte, ref int, kind byte, shadow bool, amount, limit, p1, p2, p3 int64) []byte {
	buf = binary.LittleEndian.AppendUint16(buf, uint16(ref))
	sh := byte(0)
	if shadow {
		sh = 1
	}
	buf = append(buf, kind, sh)
	for _, v := range [5]int64{amount, limit, p1, p2, p3} {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
	}
	return buf
}

// Charge kinds in operations.
const (
	kindRate        byte = 1
	kindBudget      byte = 2
	kindConcurrency byte = 3
)

// decodeAdmit reads an admission's packed result into its charges and
// reports whether it was admitted.
func decodeAdmit(res string, b *sluice.Batch, g *group) (bool, error) {
	if len(res) != 1+33*len(g.idx) {
		return false, fmt.Errorf("ops script returned %d bytes for %d charges", len(res), len(g.idx))
	}
	for k, i := range g.idx {
		r := res[1+33*k:]
		var v [5]int64
		v[0] = int64(r[0])
		for j := 1; j < 5; j++ {
			v[j] = le64(r[1+8*(j-1):])
		}
		fill(&b.Charges[i], v[:])
	}
	return res[0] == 1, nil
}

// le64 reads a little-endian int64 at the start of s.
func le64(s string) int64 {
	_ = s[7]
	return int64(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56)
}
