package redisstore

import (
	"encoding/binary"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice"
)

// globalTag is the hash tag of counters whose tenant is empty (global rules).
const globalTag = "_global"

// cachedKey is a counter's key, hash tag and slot.
type cachedKey struct {
	key, tag string
	slot     int
}

// keyCacheSize bounds the key cache; past it the cache starts afresh.
const keyCacheSize = 1 << 16

// keyOf returns a charge's key, tag and slot, from the cache when it can
// (a counter's key is built once, not at every admission and settlement).
// The cache is a plain map under a read-write lock: a sync.Map hashes a
// struct key through the generic, field-by-field path, several times
// slower.
func (s *Store) keyOf(c *sluice.Charge) *cachedKey {
	ck := cacheKey{c.Key, c.Kind}
	s.keysMu.RLock()
	k, ok := s.keys[ck]
	s.keysMu.RUnlock()
	if ok {
		return k
	}
	key, tag := s.counterKey(c)
	k = &cachedKey{key: key, tag: tag}
	if s.cluster {
		k.slot = keySlot(key)
	}
	s.keysMu.Lock()
	if len(s.keys) >= keyCacheSize {
		clear(s.keys)
	}
	s.keys[ck] = k
	s.keysMu.Unlock()
	return k
}

type cacheKey struct {
	key  sluice.CounterKey
	kind sluice.Kind
}

// counterKey returns the Redis key of a charge's counter and its hash tag:
// prefix:{tag}:kind:rule:period:subject.
func (s *Store) counterKey(c *sluice.Charge) (key, tag string) {
	tag = s.tenantOf(c.Key)
	if tag == "" {
		tag = globalTag
	} else if strings.IndexByte(tag, '}') >= 0 {
		// A brace would end the hash tag early, or make it empty.
		tag = strings.ReplaceAll(tag, "}", "%7D")
	}
	kind := "r"
	switch c.Kind {
	case sluice.KindBudget:
		kind = "b"
	case sluice.KindConcurrency:
		kind = "c"
	}
	var b strings.Builder
	b.Grow(len(s.prefix) + len(tag) + len(c.Key.Subject) + 48)
	b.WriteString(s.prefix)
	b.WriteString(":{")
	b.WriteString(tag)
	b.WriteString("}:")
	b.WriteString(kind)
	b.WriteByte(':')
	var num [20]byte
	b.Write(strconv.AppendUint(num[:0], c.Key.Rule, 16))
	b.WriteByte(':')
	b.Write(strconv.AppendInt(num[:0], c.Key.Period, 10))
	b.WriteByte(':')
	b.WriteString(c.Key.Subject)
	return b.String(), tag
}

// parseCounterKey reads back a key counterKey made:
// prefix:{tag}:kind:rule:period:subject.
func (s *Store) parseCounterKey(key string) (sluice.CounterKey, sluice.Kind, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+":{")
	if !ok {
		return sluice.CounterKey{}, "", false
	}
	// A tag holds no brace (counterKey escapes them).
	_, rest, ok = strings.Cut(rest, "}:")
	if !ok {
		return sluice.CounterKey{}, "", false
	}
	parts := strings.SplitN(rest, ":", 4)
	if len(parts) != 4 {
		return sluice.CounterKey{}, "", false
	}
	var kind sluice.Kind
	switch parts[0] {
	case "b":
		kind = sluice.KindBudget
	case "c":
		kind = sluice.KindConcurrency
	case "r":
		kind = sluice.KindRate
	default:
		return sluice.CounterKey{}, "", false
	}
	rule, err := strconv.ParseUint(parts[1], 16, 64)
	if err != nil {
		return sluice.CounterKey{}, "", false
	}
	period, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return sluice.CounterKey{}, "", false
	}
	return sluice.CounterKey{Rule: rule, Subject: parts[3], Period: period}, kind, true
}

// dueKey names the deadline index of the records in slot (on a standalone
// server there is one index). On a Cluster each slot has its own index, so
// that a script can list a record in the same slot as the counters it
// settles; the index's hash tag is a string that hashes to that slot.
func (s *Store) dueKey(slot int) string {
	if !s.cluster {
		return s.prefix + ":due"
	}
	return s.prefix + ":{" + slotTags()[slot] + "}:due"
}

// member names a batch's leases and records: the Store's nonce and the
// batch ID, 16 bytes.
func (s *Store) member(id uint64) string {
	var m [16]byte
	copy(m[:8], s.nonce)
	binary.LittleEndian.PutUint64(m[8:], id)
	return string(m[:])
}

const slots = 16384

// keySlot returns the Redis Cluster hash slot of key: CRC16 of the hash tag
// (the part between the first '{' and the next '}', when not empty), or of
// the whole key.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % slots)
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc16 is CRC-16/XMODEM, the hash of Redis Cluster.
func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}

// slotTags returns, for every slot, a short string that hashes to it.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, slots)
	for i, found := 0, 0; found < slots; i++ {
		t := strconv.FormatInt(int64(i), 36)
		if slot := crc16(t) % slots; tags[slot] == "" {
			tags[slot] = t
			found++
		}
	}
	return tags
})
