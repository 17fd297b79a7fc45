package redisstore

import (
	"context"
	"net"
	"strconv"

	"github.com/redis/rueidis"
)

// probeScript lists which of the deadline indexes named in ARGV hold
// records. It reads keys of many slots of the node it runs on, which Redis
// allows a script without a shebang line (the keys are all local).
var probeScript = rueidis.NewLuaScriptReadOnly(probeLua)

const probeLua = `
local out = {}
for i, k in ipairs(ARGV) do
  if redis.call('ZCARD', k) > 0 then out[#out + 1] = i - 1 end
end
return out`

// probeChunk is the number of indexes a fallback probe reads per round trip.
const probeChunk = 512

// forceChunkedProbe makes dueSlots skip the per-node probe script (tests).
var forceChunkedProbe = false

// dueSlots returns the Cluster slots whose deadline index holds records: one
// probe script per master, each reading the indexes of the slots it serves,
// or, when that fails (slots moving, a proxy that forbids it), ZCARD of
// every index in pipelined chunks.
func (s *Store) dueSlots(ctx context.Context) ([]int, error) {
	if !forceChunkedProbe {
		if due, err := s.probeByNode(ctx); err == nil {
			return due, nil
		}
	}
	var due []int
	cmds := make(rueidis.Commands, 0, probeChunk)
	for first := 0; first < slots; first += probeChunk {
		cmds = cmds[:0]
		for slot := first; slot < first+probeChunk; slot++ {
			cmds = append(cmds, s.client.B().Zcard().Key(s.dueKey(slot)).Build())
		}
		cctx, cancel := s.call(ctx)
		counts := s.client.DoMulti(cctx, cmds...)
		cancel()
		for k, r := range counts {
			n, err := r.AsInt64()
			if err != nil {
				return nil, err
			}
			if n > 0 {
				due = append(due, first+k)
			}
		}
	}
	return due, nil
}

// probeByNode runs the probe script once per master.
func (s *Store) probeByNode(ctx context.Context) ([]int, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	ranges, err := s.client.Do(cctx, s.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	bySlotOwner := map[string][]int{}
	for _, r := range ranges {
		v, err := r.ToArray()
		if err != nil || len(v) < 3 {
			return nil, errBadSlots
		}
		first, err1 := v[0].AsInt64()
		last, err2 := v[1].AsInt64()
		owner, err3 := v[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(owner) < 2 {
			return nil, errBadSlots
		}
		host, _ := owner[0].ToString()
		port, _ := owner[1].AsInt64()
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		for slot := first; slot <= last && slot < slots; slot++ {
			bySlotOwner[addr] = append(bySlotOwner[addr], int(slot))
		}
	}
	nodes := s.client.Nodes()
	var due []int
	for addr, owned := range bySlotOwner {
		node, ok := nodes[addr]
		if !ok {
			return nil, errBadSlots
		}
		keys := make([]string, len(owned))
		for i, slot := range owned {
			keys[i] = s.dueKey(slot)
		}
		found, err := probeScript.Exec(cctx, node, nil, keys).AsIntSlice()
		if err != nil {
			return nil, err
		}
		for _, i := range found {
			due = append(due, owned[i])
		}
	}
	return due, nil
}

var errBadSlots = errorString("unexpected CLUSTER SLOTS reply")

type errorString string

func (e errorString) Error() string { return string(e) }
