package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Store is an admin.ReservationLister.
var _ interface {
	Reservations(context.Context, int) ([]sluice.Batch, error)
} = (*Store)(nil)

// Reservations lists the open reservations of every replica: the records of
// the deadline indexes, the soonest deadline first (then by ID). On a
// Cluster it reads the first limit records of each slot's index that holds
// any (found as the sweep finds them), enough for the first limit batches
// overall since a batch has at most one record per slot, and joins the
// records of a batch admitted in several slots into one reservation.
func (s *Store) Reservations(ctx context.Context, limit int) ([]sluice.Batch, error) {
	if limit <= 0 {
		return nil, nil
	}
	indexes := []string{s.dueKey(0)}
	if s.cluster {
		due, err := s.dueSlots(ctx)
		if err != nil {
			return nil, fmt.Errorf("redisstore: reservations: %w", err)
		}
		indexes = indexes[:0]
		for _, slot := range due {
			indexes = append(indexes, s.dueKey(slot))
		}
	}
	var out []sluice.Batch
	at := map[string]int{} // a member's place in out
	for first := 0; first < len(indexes); first += probeChunk {
		chunk := indexes[first:min(first+probeChunk, len(indexes))]
		cmds := make(rueidis.Commands, len(chunk))
		for i, index := range chunk {
			cmds[i] = s.client.B().Zrangebyscore().Key(index).Min("-inf").Max("+inf").Withscores().Limit(0, int64(limit)).Build()
		}
		cctx, cancel := s.call(ctx)
		replies := s.client.DoMulti(cctx, cmds...)
		cancel()
		for _, reply := range replies {
			recs, err := reply.AsZScores()
			if err != nil {
				return nil, fmt.Errorf("redisstore: reservations: %w", err)
			}
			for _, rec := range recs {
				member, charges, err := s.parseRecord(rec.Member)
				if err != nil {
					return nil, fmt.Errorf("redisstore: reservations: %w", err)
				}
				if i, ok := at[member]; ok {
					out[i].Charges = append(out[i].Charges, charges...)
					continue
				}
				at[member] = len(out)
				// The score is the deadline in microseconds, below 2^53.
				out = append(out, sluice.Batch{ID: memberID(member), Deadline: time.UnixMicro(int64(rec.Score)), Charges: charges})
			}
		}
	}
	slices.SortFunc(out, func(a, b sluice.Batch) int {
		return cmp.Or(a.Deadline.Compare(b.Deadline), cmp.Compare(a.ID, b.ID))
	})
	return out[:min(limit, len(out))], nil
}
