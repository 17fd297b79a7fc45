package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// maxCharges is the most charges one group may hold (the ops script's
// encoding).
const maxCharges = 1 << 14

// The scripts' Lua pays for every call into C (struct.unpack, tonumber) and
// for every field a call decodes, so an operation is laid out for one
// struct.unpack call: numbers as little-endian doubles (exact: every value
// is an integer below 2^53, see precision.go), strings preceded by their
// length. See ops.lua for the layout.

// opBlob starts encoding one operation: its type, deadline, deadline index
// reference, give-up time (server µs, 0 for none), lease member (16 bytes)
// and the deadline in decimal. Key references are indexes into the
// operation's own keys until the lane rewrites them for its batch.
func opBlob(typ byte, deadline time.Time, dueRef int, giveUp int64, member string, n int) []byte {
	dl := ceilMicro(deadline)
	buf := make([]byte, 0, headerSize+20+chargeSize*n+8)
	buf = appendNum(buf, int64(typ))
	buf = appendNum(buf, dl)
	buf = appendNum(buf, int64(dueRef))
	buf = appendNum(buf, giveUp)
	buf = append(buf, member...)
	mark := len(buf)
	buf = appendNum(buf, 0)
	buf = strconv.AppendInt(buf, dl, 10)
	binary.LittleEndian.PutUint64(buf[mark:], math.Float64bits(float64(len(buf)-mark-8)))
	return buf
}

// appendCharge encodes one charge of an operation.
func appendCharge(buf []byte, ref int, kind byte, shadow bool, amount, limit, p1, p2, p3 int64) []byte {
	k := int64(kind)
	if shadow {
		k += shadowKind
	}
	for _, v := range [7]int64{int64(ref), k, amount, limit, p1, p2, p3} {
		buf = appendNum(buf, v)
	}
	return buf
}

// endBlob ends an operation with its reservation record ("" for none).
func endBlob(buf []byte, rec string) []byte {
	return append(appendNum(buf, int64(len(rec))), rec...)
}

// appendNum appends v as a little-endian double.
func appendNum(buf []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(buf, math.Float64bits(float64(v)))
}

// Charge kinds in operations; a shadow charge's kind is offset by
// shadowKind.
const (
	kindRate        byte = 1
	kindBudget      byte = 2
	kindConcurrency byte = 3
	shadowKind           = 4
)

// Layout: the fixed part of an operation's header (type, deadline, deadline
// index, give-up time, member, the deadline's decimal length), the offsets
// of its type, deadline index reference and give-up time, and a charge's
// size (seven doubles, the key reference first).
const (
	headerSize = 4*8 + memberSize + 8
	typeAt     = 0
	dueRefAt   = 16
	giveUpAt   = 24
	memberSize = 16
	chargeSize = 7 * 8
	resultSize = 1 + 3*8
)

// decodeAdmit reads an admission's packed result into its results and
// reports whether it was admitted. Per charge the script returns allowed,
// then one figure (a rate's remaining units, a budget's or concurrency
// cap's usage) from which the other follows, the retry after (µs, -1 for
// never) and the reset (µs, 0 for none).
func decodeAdmit(res string, b *sluice.Batch, results []sluice.ChargeResult, p *plan, g *group) (bool, error) {
	if res == resultLate {
		return false, errLate
	}
	if len(res) != 1+resultSize*len(g.idx) {
		return false, fmt.Errorf("ops script returned %d bytes for %d charges", len(res), len(g.idx))
	}
	for k, i := range g.idx {
		r := res[1+resultSize*k:]
		c := &b.Charges[i]
		var v [5]int64
		v[0] = int64(r[0])
		figure := num(r[1:])
		switch c.Kind {
		case sluice.KindRate:
			v[1], v[2] = figure, p.buckets[i].burst-figure
		default:
			v[1], v[2] = max(0, c.Limit-figure), figure
		}
		v[3], v[4] = num(r[9:]), num(r[17:])
		results[i] = resultOf(c, v[:])
	}
	return res[0] == 1, nil
}

// setNum overwrites the double at offset at of an encoded operation.
func setNum(blob []byte, at int, v int64) {
	binary.LittleEndian.PutUint64(blob[at:], math.Float64bits(float64(v)))
}

// num reads a little-endian double at the start of s as an integer.
func num(s string) int64 {
	_ = s[7]
	return int64(math.Float64frombits(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56))
}

// rebase rewrites the key references of an operation of n charges (indexes
// into keys) into indexes into the batch's keys, adding new keys to it.
func rebase(blob []byte, n int, keys []string, batch *[]string, index map[string]int) {
	ref := func(at int) {
		local := int(math.Float64frombits(binary.LittleEndian.Uint64(blob[at:])))
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
		binary.LittleEndian.PutUint64(blob[at:], math.Float64bits(float64(global)))
	}
	ref(dueRefAt)
	dlLen := int(math.Float64frombits(binary.LittleEndian.Uint64(blob[headerSize-8:])))
	first := headerSize + dlLen
	for i := range n {
		ref(first + i*chargeSize)
	}
}
