package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

var _ sluice.LeaseRenewer = (*Store)(nil)

// renewSQL moves the deadline of reservation rows ($2 keys, $3 times to
// live) and the expiry of lease rows ($4-$7 keys, $8 times to live) to the
// database's now plus their time to live, never back, and only for rows
// not past it. It waits for no lock, so it can deadlock with nothing: a row
// locked is being settled, swept or pruned, and is left to that.
const renewSQL = `WITH now AS (SELECT coalesce($1::bigint, sluice_now()) AS ns),
res AS (
	SELECT r.batch_id, w.ttl FROM sluice_reservations r
	JOIN unnest($2::bigint[], $3::bigint[]) AS w(batch_id, ttl) ON r.batch_id = w.batch_id
	WHERE r.deadline > (SELECT ns FROM now)
	FOR UPDATE OF r SKIP LOCKED
),
lease AS (
	SELECT l.rule, l.subject, l.period, l.batch_id, w.ttl FROM sluice_leases l
	JOIN unnest($4::bigint[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[]) AS w(rule, subject, period, batch_id, ttl)
		ON l.rule = w.rule AND l.subject = w.subject AND l.period = w.period AND l.batch_id = w.batch_id
	WHERE l.expiry > (SELECT ns FROM now)
	FOR UPDATE OF l SKIP LOCKED
),
renewed_res AS (
	UPDATE sluice_reservations r SET deadline = greatest(r.deadline, (SELECT ns FROM now) + res.ttl)
	FROM res WHERE r.batch_id = res.batch_id RETURNING 1
),
renewed_lease AS (
	UPDATE sluice_leases l SET expiry = greatest(l.expiry, (SELECT ns FROM now) + lease.ttl)
	FROM lease WHERE l.rule = lease.rule AND l.subject = lease.subject AND l.period = lease.period AND l.batch_id = lease.batch_id
	RETURNING 1
)
SELECT (SELECT count(*) FROM renewed_res), (SELECT count(*) FROM renewed_lease)`

// RenewLeases moves the deadline of each batch's reservation row and the
// expiry of its lease rows, in one statement. Like admissions, a row's
// deadline is the database's now plus the time to live the caller's clock
// gives it.
func (s *Store) RenewLeases(ctx context.Context, now time.Time, renewals []sluice.Batch) error {
	var resKeys, resTTLs, rules, periods, leaseKeys, leaseTTLs []int64
	var subjects []string
	for i := range renewals {
		b := &renewals[i]
		ttl := int64(b.Deadline.Sub(now))
		key := batchKey(b.ID)
		budget := false
		for i := range b.Charges {
			c := &b.Charges[i]
			switch c.Kind {
			case sluice.KindBudget:
				budget = true
			case sluice.KindConcurrency:
				rules, subjects, periods = append(rules, int64(c.Key.Rule)), append(subjects, c.Key.Subject), append(periods, c.Key.Period)
				leaseKeys, leaseTTLs = append(leaseKeys, key), append(leaseTTLs, ttl)
			}
		}
		if budget {
			resKeys, resTTLs = append(resKeys, key), append(resTTLs, ttl)
		}
	}
	if len(resKeys) == 0 && len(leaseKeys) == 0 {
		return nil
	}
	err := s.call(ctx, func(ctx context.Context) error {
		var res, leases int64
		return s.pool.QueryRow(ctx, renewSQL, s.now(now), resKeys, resTTLs, rules, subjects, periods, leaseKeys, leaseTTLs).Scan(&res, &leases)
	})
	if err != nil {
		return fmt.Errorf("pgstore: renew leases: %w", err)
	}
	return nil
}
