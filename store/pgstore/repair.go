package pgstore

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/counter"
)

// budgetFigures returns a charge's limit, amount and actual as the SQL
// takes them: a budget's within [0, sluice.CounterCeiling], where its
// counters saturate (migration 0003), so that no sum of two overflows a
// bigint; a rate's and a concurrency cap's as they are.
func budgetFigures(c *sluice.Charge) (limit, amount, actual int64) {
	if c.Kind != sluice.KindBudget {
		return c.Limit, c.Amount, c.Actual
	}
	return counter.Clamp(c.Limit), counter.Clamp(c.Amount), counter.Clamp(c.Actual)
}

var ceilingSQL = strconv.FormatInt(counter.Ceiling, 10)

// repairSQL sets every budget counter out of [0, ceiling] back within it,
// returning each with the figures it held. Usage out of bounds can only be
// a sum that overflowed (or a hand's edit): it is set to the ceiling, the
// budget spent until its period ends, where 0 would hand the rest of the
// period a whole budget. Reservations are clamped.
var repairSQL = `WITH bad AS (
	SELECT rule, subject, period, used, reserved FROM sluice_counters
	WHERE used < 0 OR used > ` + ceilingSQL + ` OR reserved < 0 OR reserved > ` + ceilingSQL + `
	FOR UPDATE
)
UPDATE sluice_counters c
SET used = CASE WHEN bad.used < 0 OR bad.used > ` + ceilingSQL + ` THEN ` + ceilingSQL + ` ELSE bad.used END,
	reserved = least(greatest(bad.reserved, 0), ` + ceilingSQL + `)
FROM bad
WHERE c.rule = bad.rule AND c.subject = bad.subject AND c.period = bad.period
RETURNING c.rule, c.subject, c.period, bad.used, bad.reserved`

// repair runs repairSQL on Open and logs one warning per counter repaired.
// It reads the whole counters table once (counters are dropped when idle,
// so the table holds the subjects in use), with the connections' short
// statement_timeout lifted as for a migration: Open's own deadline bounds
// it.
func (s *Store) repair(ctx context.Context) error {
	type bad struct {
		rule, period, used, reserved int64
		subject                      string
	}
	var found []bad
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, repairSQL)
		if err != nil {
			return err
		}
		var b bad
		_, err = pgx.ForEachRow(rows, []any{&b.rule, &b.subject, &b.period, &b.used, &b.reserved}, func() error {
			found = append(found, b)
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	for _, b := range found {
		s.log.Warn("pgstore: budget counter out of bounds, repaired: usage past 2^53 or negative is taken as spent until its period ends",
			"rule", uint64(b.rule), "subject", b.subject, "period", b.period, "used", b.used, "reserved", b.reserved)
	}
	return nil
}
