package sqlitestore

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/sluicehq/sluice/internal/counter"
)

// badUsage selects the budget counters whose usage is not an INTEGER within
// [0, counter.Ceiling]: a file written before the journal saturated, where
// a sum past 2^63 became a REAL or wrapped negative.
var badUsage = `SELECT rule, subject, period, CAST(used AS TEXT) FROM budget_usage
	WHERE typeof(used) <> 'integer' OR used < 0 OR used > ` + strconv.FormatInt(counter.Ceiling, 10)

// repair sets every bad usage to counter.Ceiling, logging one warning per
// counter. The only way to a bad value is a sum that overflowed (a REAL
// past 2^63, or an integer wrapped negative), so the budget was spent:
// Ceiling keeps it refusing until its period ends, where 0 would hand the
// rest of the period a whole budget.
func (s *Store) repair(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, badUsage)
	if err != nil {
		return err
	}
	type bad struct {
		rule, period int64
		subject, was string
	}
	var found []bad
	for rows.Next() {
		var b bad
		if err := rows.Scan(&b.rule, &b.subject, &b.period, &b.was); err != nil {
			rows.Close()
			return err
		}
		found = append(found, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, b := range found {
		if _, err := tx.ExecContext(ctx, `UPDATE budget_usage SET used = ? WHERE rule = ? AND subject = ? AND period = ?`,
			int64(counter.Ceiling), b.rule, b.subject, b.period); err != nil {
			return err
		}
		s.log.Warn("sqlitestore: budget counter out of bounds, repaired: spent until its period ends",
			"rule", uint64(b.rule), "subject", b.subject, "period", b.period, "used", b.was, "repaired", int64(counter.Ceiling))
	}
	return nil
}
