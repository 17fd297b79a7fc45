package pgstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

// Store is an admin.ReservedReader.
var _ interface {
	Reserved(context.Context, []sluice.CounterKey) ([]int64, error)
} = (*Store)(nil)

// reservedSQL reads the reserved column of each budget counter named, in
// the order named; a counter with no row holds nothing.
const reservedSQL = `SELECT coalesce(c.reserved, 0)
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) WITH ORDINALITY AS k(rule, subject, period, i)
LEFT JOIN sluice_counters c ON c.rule = k.rule AND c.subject = k.subject COLLATE "C" AND c.period = k.period
ORDER BY k.i`

// Reserved returns what open reservations, of every replica, hold on each
// budget counter of keys. It reads without locking.
func (s *Store) Reserved(ctx context.Context, keys []sluice.CounterKey) ([]int64, error) {
	rules, subjects, periods := make([]int64, len(keys)), make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		rules[i], subjects[i], periods[i] = int64(k.Rule), k.Subject, k.Period
	}
	out := make([]int64, 0, len(keys))
	err := s.call(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, reservedSQL, rules, subjects, periods)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: reserved: %w", err)
	}
	if len(out) != len(keys) {
		return nil, fmt.Errorf("pgstore: reserved: %d rows for %d keys", len(out), len(keys))
	}
	return out, nil
}
