package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// OutcomeCount is how many calls of one key ended with one outcome.
type OutcomeCount struct {
	Org       string `json:"org"`
	Workspace string `json:"workspace"`
	KeyID     string `json:"key"`
	Outcome   string `json:"outcome"`
	Calls     int64  `json:"calls"`
}

// CallOutcomes counts the call records q selects (its BeforeID and Limit
// aside) by org, workspace, key and outcome: settled calls and refusals
// alike, so that a key refused all day shows its refusals. It reads what
// has been flushed.
func (c *Catalog) CallOutcomes(ctx context.Context, q CallQuery) ([]OutcomeCount, error) {
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return nil, fmt.Errorf("catalog: call outcomes: %w: since %s is not before until %s", ErrInvalid, q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339))
	}
	where, args := q.filters()
	query := `SELECT org, workspace, key_id, outcome, COUNT(*) FROM call_records`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " GROUP BY org, workspace, key_id, outcome ORDER BY org, workspace, key_id, outcome"
	rows, err := c.db.QueryContext(ctx, c.d.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: call outcomes: %w", err)
	}
	defer rows.Close()
	var out []OutcomeCount
	for rows.Next() {
		var oc OutcomeCount
		if err := rows.Scan(&oc.Org, &oc.Workspace, &oc.KeyID, &oc.Outcome, &oc.Calls); err != nil {
			return nil, fmt.Errorf("catalog: call outcomes: %w", err)
		}
		out = append(out, oc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: call outcomes: %w", err)
	}
	return out, nil
}
