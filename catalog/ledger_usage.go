package catalog

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
)

// usageColumn is the ledger column of each grouping; "tag" groups the
// column of tag sets, split afterwards.
var usageColumn = map[string]string{
	"org": "org", "workspace": "workspace", "day": "day", "route": "route", "model": "model",
	"key": "key_id", "user": "user_id", "team": "team", "tag": "tags", "kind": "kind",
}

// Usage sums the ledger rows q selects, grouped as q asks, ordered by the
// grouped columns. It reads what has been flushed: call Flush first to
// include the last few milliseconds' requests.
func (c *Catalog) Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	var groups []string
	for _, g := range q.GroupBy {
		if _, ok := usageColumn[g]; !ok {
			return nil, fmt.Errorf("catalog: usage: %w: cannot group by %q (want one of %s)", ErrInvalid, g, strings.Join(UsageGroups, ", "))
		}
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	var where []string
	var args []any
	if q.Org != "" {
		where = append(where, "org = ?")
		args = append(args, q.Org)
	}
	if q.Workspace != "" {
		where = append(where, "workspace = ?")
		args = append(args, q.Workspace)
	}
	if q.Key != "" {
		where = append(where, "key_id = ?")
		args = append(args, q.Key)
	}
	var from, to string
	if !q.From.IsZero() {
		from = q.From.UTC().Format(dayLayout)
		where = append(where, "day >= ?")
		args = append(args, from)
	}
	if !q.To.IsZero() {
		to = q.To.UTC().Format(dayLayout)
		where = append(where, "day <= ?")
		args = append(args, to)
	}
	if from != "" && to != "" && from > to {
		return nil, fmt.Errorf("catalog: usage: %w: from %s is after to %s", ErrInvalid, from, to)
	}
	cols := make([]string, len(groups))
	for i, g := range groups {
		cols[i] = usageColumn[g]
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for _, col := range cols {
		b.WriteString(col + ", ")
	}
	for i, col := range []string{"requests", "input_tokens", "output_tokens", "cached_input_tokens", "tokens", "cost_micros",
		"CASE WHEN kind = '" + kindSwept + "' THEN requests ELSE 0 END", "CASE WHEN kind = '" + kindHit + "' THEN requests ELSE 0 END",
		"cache_saved_micros"} {
		if i > 0 {
			b.WriteString(", ")
		}
		// The cast keeps PostgreSQL's SUM(bigint), a numeric, an integer.
		fmt.Fprintf(&b, "CAST(COALESCE(SUM(%s), 0) AS BIGINT)", col)
	}
	b.WriteString(" FROM usage_ledger")
	if len(where) > 0 {
		b.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	if len(groups) > 0 {
		list := strings.Join(cols, ", ")
		b.WriteString(" GROUP BY " + list + " ORDER BY " + list)
	}
	rows, err := c.db.QueryContext(ctx, c.d.q(b.String()), args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: usage: %w", err)
	}
	defer rows.Close()
	var out []UsageRow
	for rows.Next() {
		r := UsageRow{Org: q.Org, Workspace: q.Workspace, Key: q.Key}
		dest := make([]any, 0, len(groups)+9)
		for _, g := range groups {
			dest = append(dest, r.field(g))
		}
		dest = append(dest, &r.Requests, &r.InputTokens, &r.OutputTokens, &r.CachedInputTokens, &r.Tokens, &r.CostMicros, &r.SweptRequests,
			&r.CacheHits, &r.CacheSavedMicros)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("catalog: usage: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: usage: %w", err)
	}
	if slices.Contains(groups, "tag") {
		out = splitTags(out, groups)
	}
	return out, nil
}

// field returns the address of the column grouping g fills.
func (r *UsageRow) field(g string) *string {
	switch g {
	case "org":
		return &r.Org
	case "workspace":
		return &r.Workspace
	case "day":
		return &r.Day
	case "route":
		return &r.Route
	case "model":
		return &r.Model
	case "key":
		return &r.Key
	case "user":
		return &r.User
	case "team":
		return &r.Team
	case "tag":
		return &r.Tag
	}
	return &r.Kind
}

func (r *UsageRow) add(o *UsageRow) {
	r.Requests += o.Requests
	r.InputTokens += o.InputTokens
	r.OutputTokens += o.OutputTokens
	r.CachedInputTokens += o.CachedInputTokens
	r.Tokens += o.Tokens
	r.CostMicros += o.CostMicros
	r.SweptRequests += o.SweptRequests
	r.CacheHits += o.CacheHits
	r.CacheSavedMicros += o.CacheSavedMicros
}

// splitTags turns rows grouped by tag set (in Tag) into rows per tag: a row
// of tags "a,b" counts in the rows of a and of b. The rows come back
// ordered by the grouped columns again.
func splitTags(rows []UsageRow, groups []string) []UsageRow {
	type groupKey [10]string
	keyOf := func(r *UsageRow) groupKey {
		var k groupKey
		for i, g := range groups {
			k[i] = *r.field(g)
		}
		return k
	}
	index := map[groupKey]int{}
	var out []UsageRow
	for i := range rows {
		set := rows[i].Tag
		for _, tag := range strings.Split(set, ",") {
			r := rows[i]
			r.Tag = tag
			k := keyOf(&r)
			if j, ok := index[k]; ok {
				out[j].add(&r)
				continue
			}
			index[k] = len(out)
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b UsageRow) int {
		for _, g := range groups {
			if c := cmp.Compare(*a.field(g), *b.field(g)); c != 0 {
				return c
			}
		}
		return 0
	})
	return out
}
