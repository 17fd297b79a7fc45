package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Store is an admin.ReservedReader.
var _ interface {
	Reserved(context.Context, []sluice.CounterKey) ([]int64, error)
} = (*Store)(nil)

// Reserved returns what open reservations, of every replica, hold on each
// budget counter of keys: the r field of each budget's hash, read in one
// pipeline (each key on its own slot's master in a Cluster).
func (s *Store) Reserved(ctx context.Context, keys []sluice.CounterKey) ([]int64, error) {
	out := make([]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		key := s.keyOf(&sluice.Charge{Key: k, Kind: sluice.KindBudget}).key
		cmds[i] = s.client.B().Hget().Key(key).Field("r").Build()
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	for i, r := range s.client.DoMulti(cctx, cmds...) {
		v, err := r.AsInt64()
		switch {
		case rueidis.IsRedisNil(err):
		case err != nil:
			return nil, fmt.Errorf("redisstore: reserved: %w", err)
		default:
			out[i] = v
		}
	}
	return out, nil
}
