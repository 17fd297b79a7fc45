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
// layout), little-endian throughout. Key references are indexes into the
// operation's own keys until the lane rewrites them for its batch.
func opBlob(typ byte, deadline time.Time, dueRef int, member, rec string, n int) []byte {
	dl := ceilMicro(deadline)
	buf := make([]byte, 0, 40+len(member)+len(rec)+44*n)
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

// Offsets in an operation's encoding: the deadline's decimal length is at
// dlLenAt, and a charge's fields are chargeSize bytes.
const (
	dlLenAt    = 9
	chargeSize = 44
)

// rebase rewrites an operation's key references (indexes into keys) into
// indexes into the batch's keys, adding new keys to it.
func rebase(blob []byte, keys []string, batch *[]string, index map[string]int) {
	ref := func(at int) {
		local := int(binary.LittleEndian.Uint16(blob[at:]))
		if local == 0 {
			return
		}
		k := keys[local-1]
		global, ok := index[k]
		if !ok {
			*batch = append(*batch, k)
			global = len(*batch)
			index[k] = global
		}
		binary.LittleEndian.PutUint16(blob[at:], uint16(global))
	}
	dueAt := dlLenAt + 1 + int(blob[dlLenAt])
	ref(dueAt)
	n := int(binary.LittleEndian.Uint16(blob[dueAt+2:]))
	memberLen := int(binary.LittleEndian.Uint16(blob[dueAt+4:]))
	recAt := dueAt + 6 + memberLen
	first := recAt + 4 + int(binary.LittleEndian.Uint32(blob[recAt:]))
	for i := range n {
		ref(first + i*chargeSize)
	}
}
