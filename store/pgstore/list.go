package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Store is an admin.ReservationLister.
var _ interface {
	Reservations(context.Context, int) ([]sluice.Batch, error)
} = (*Store)(nil)

// listSQL reads the open reservation rows, the soonest deadline first (the
// deadline index gives that order; ties by row key).
const listSQL = `SELECT batch_id, deadline, kind, rule, subject, period, amount
FROM sluice_reservations ORDER BY deadline, batch_id LIMIT $1`

// Reservations lists the open reservations of every replica: the rows of
// the batches with a budget charge that no settlement or sweep has deleted.
// It reads without locking.
func (s *Store) Reservations(ctx context.Context, limit int) ([]sluice.Batch, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []sluice.Batch
	err := s.call(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, listSQL, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				key, deadline       int64
				kinds               []int16
				rules, periods, amt []int64
				subjects            []string
			)
			if err := rows.Scan(&key, &deadline, &kinds, &rules, &subjects, &periods, &amt); err != nil {
				return err
			}
			if n := len(kinds); len(rules) != n || len(subjects) != n || len(periods) != n || len(amt) != n {
				return fmt.Errorf("reservation row %d: charge arrays of unequal lengths", key)
			}
			r := sluice.Batch{ID: batchID(key), Deadline: time.Unix(0, deadline)}
			for i, kind := range kinds {
				c := sluice.Charge{Key: sluice.CounterKey{Rule: uint64(rules[i]), Subject: subjects[i], Period: periods[i]}}
				switch kind {
				case kindBudget:
					c.Kind, c.Amount = sluice.KindBudget, amt[i]
				case kindConcurrency:
					c.Kind, c.Amount = sluice.KindConcurrency, 1
				default:
					continue // a rate charge holds nothing once admitted
				}
				r.Charges = append(r.Charges, c)
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: reservations: %w", err)
	}
	return out, nil
}

// batchID inverts batchKey: the ID of the batch whose rows have key.
func batchID(key int64) uint64 {
	id := uint64(key)
	id ^= id>>29 ^ id>>58
	id *= 0xf1de83e19937733d // the inverse of batchKey's factor modulo 2^64
	id ^= id>>31 ^ id>>62
	return id
}
