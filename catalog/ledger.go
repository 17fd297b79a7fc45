package catalog

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// UsageEntry is what one request (or several) used, as counted by the
// gateway after settlement. It carries counters only: never a prompt or an
// answer.
type UsageEntry struct {
	// Org is the org of Workspace; empty means "default".
	Org       string
	Workspace string
	Route     string
	Model     string
	// At places the entry on a UTC day; zero means now.
	At                time.Time
	Requests          int64
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	CostMicros        int64
}

// UsageQuery selects and groups ledger rows.
type UsageQuery struct {
	// Org keeps one org; empty keeps all.
	Org string
	// Workspace keeps one workspace (of Org, or of any org when Org is
	// empty); empty keeps all.
	Workspace string
	// From and To bound the UTC days kept, both inclusive; only their date
	// (in UTC) counts. Zero leaves that side open.
	From, To time.Time
	// GroupBy names the columns rows are grouped by: any of "org",
	// "workspace", "day", "route", "model". Empty sums everything into one
	// row.
	GroupBy []string
}

// UsageRow is a sum of ledger rows. Columns not grouped by are empty,
// except Org and Workspace when the query named them.
type UsageRow struct {
	Org               string `json:"org,omitempty"`
	Workspace         string `json:"workspace,omitempty"`
	Day               string `json:"day,omitempty"`
	Route             string `json:"route,omitempty"`
	Model             string `json:"model,omitempty"`
	Requests          int64  `json:"requests"`
	InputTokens       int64  `json:"input_tokens"`
	OutputTokens      int64  `json:"output_tokens"`
	CachedInputTokens int64  `json:"cached_input_tokens"`
	CostMicros        int64  `json:"cost_micros"`
}

const dayLayout = "2006-01-02"

type usageKey struct{ org, workspace, day, route, model string }

type usageSums struct{ requests, input, output, cached, cost int64 }

func (s *usageSums) add(o usageSums) {
	s.requests += o.requests
	s.input += o.input
	s.output += o.output
	s.cached += o.cached
	s.cost += o.cost
}

// ledger sums usage in memory between flushes.
type ledger struct {
	flushMu sync.Mutex // one flush at a time

	mu      sync.Mutex
	pending map[usageKey]*usageSums
	// wake tells the flusher that entries are pending.
	wake chan struct{}
	// The day string of the last entry, so most entries format no date.
	lastDay    int64
	lastDayStr string
}

func newLedger() *ledger {
	return &ledger{pending: map[usageKey]*usageSums{}, lastDay: -1 << 62, wake: make(chan struct{}, 1)}
}

// RecordUsage adds e to the ledger. It never touches the database: entries
// are summed in memory per (org, workspace, day, route, model) and written by
// the background flusher within a few milliseconds (ledgerGroupDelay; the
// entries recorded while it writes go in its next write), by Flush, or by
// Close. Entries recorded after Close are lost.
func (c *Catalog) RecordUsage(e UsageEntry) {
	at := e.At
	if at.IsZero() {
		at = c.now()
	}
	l := c.led
	day := floorDiv(at.Unix(), 86400)
	sums := usageSums{e.Requests, e.InputTokens, e.OutputTokens, e.CachedInputTokens, e.CostMicros}
	l.mu.Lock()
	defer l.mu.Unlock()
	if day != l.lastDay {
		l.lastDay, l.lastDayStr = day, at.UTC().Format(dayLayout)
	}
	org := e.Org
	if org == "" {
		org = "default"
	}
	k := usageKey{org, e.Workspace, l.lastDayStr, e.Route, e.Model}
	if s := l.pending[k]; s != nil {
		s.add(sums)
	} else {
		fresh := new(usageSums) // allocated only for a new row, not per entry
		*fresh = sums
		l.pending[k] = fresh
	}
	select {
	case l.wake <- struct{}{}:
	default: // the flusher is awake already
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Flush writes the ledger's in-memory sums to the database in one
// transaction. On failure the sums are kept for the next flush. The gateway
// calls it at shutdown (Close does too).
func (c *Catalog) Flush(ctx context.Context) error {
	l := c.led
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	batch := l.pending
	if len(batch) == 0 {
		l.mu.Unlock()
		return nil
	}
	l.pending = make(map[usageKey]*usageSums, len(batch))
	l.mu.Unlock()

	err := c.inTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, c.d.q(`INSERT INTO usage_ledger
			(org, workspace, day, route, model, requests, input_tokens, output_tokens, cached_input_tokens, cost_micros)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (org, workspace, day, route, model) DO UPDATE SET
				requests = usage_ledger.requests + excluded.requests,
				input_tokens = usage_ledger.input_tokens + excluded.input_tokens,
				output_tokens = usage_ledger.output_tokens + excluded.output_tokens,
				cached_input_tokens = usage_ledger.cached_input_tokens + excluded.cached_input_tokens,
				cost_micros = usage_ledger.cost_micros + excluded.cost_micros`))
		if err != nil {
			return err
		}
		defer stmt.Close()
		for k, s := range batch {
			if _, err := stmt.ExecContext(ctx, k.org, k.workspace, k.day, k.route, k.model,
				s.requests, s.input, s.output, s.cached, s.cost); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		l.mu.Lock()
		for k, s := range batch {
			if p := l.pending[k]; p != nil {
				p.add(*s)
			} else {
				l.pending[k] = s
			}
		}
		l.mu.Unlock()
		return fmt.Errorf("catalog: flush usage: %w", err)
	}
	return nil
}

// ledgerGroupDelay is how long the flusher lets entries gather before a
// write: one commit per few milliseconds however many calls settle, the
// most a crash can lose of the ledger.
const ledgerGroupDelay = 5 * time.Millisecond

// flushLoop writes the ledger whenever entries are pending, until Close;
// after a failed write it waits interval before it tries again.
func (c *Catalog) flushLoop(interval time.Duration) {
	defer close(c.stopped)
	for {
		select {
		case <-c.stop:
			return
		case <-c.led.wake:
		}
		select {
		case <-c.stop:
			return
		case <-time.After(ledgerGroupDelay):
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(interval, 10*time.Second))
		err := c.Flush(ctx)
		cancel()
		if err == nil {
			continue
		}
		c.onFlushError(err)
		select {
		case <-c.stop:
			return
		case <-time.After(interval):
		}
		select {
		case c.led.wake <- struct{}{}: // the kept sums are pending still
		default:
		}
	}
}

var usageGroups = []string{"org", "workspace", "day", "route", "model"}

// Usage sums the ledger rows q selects, grouped as q asks, ordered by the
// grouped columns. It reads what has been flushed: call Flush first to
// include the last second's requests.
func (c *Catalog) Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	var groups []string
	for _, g := range q.GroupBy {
		if !slices.Contains(usageGroups, g) {
			return nil, fmt.Errorf("catalog: usage: %w: cannot group by %q (want org, workspace, day, route or model)", ErrInvalid, g)
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
	var b strings.Builder
	b.WriteString("SELECT ")
	for _, g := range groups {
		b.WriteString(g + ", ")
	}
	for i, col := range []string{"requests", "input_tokens", "output_tokens", "cached_input_tokens", "cost_micros"} {
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
		list := strings.Join(groups, ", ")
		b.WriteString(" GROUP BY " + list + " ORDER BY " + list)
	}
	rows, err := c.db.QueryContext(ctx, c.d.q(b.String()), args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: usage: %w", err)
	}
	defer rows.Close()
	var out []UsageRow
	for rows.Next() {
		r := UsageRow{Org: q.Org, Workspace: q.Workspace}
		dest := make([]any, 0, len(groups)+5)
		for _, g := range groups {
			switch g {
			case "org":
				dest = append(dest, &r.Org)
			case "workspace":
				dest = append(dest, &r.Workspace)
			case "day":
				dest = append(dest, &r.Day)
			case "route":
				dest = append(dest, &r.Route)
			case "model":
				dest = append(dest, &r.Model)
			}
		}
		dest = append(dest, &r.Requests, &r.InputTokens, &r.OutputTokens, &r.CachedInputTokens, &r.CostMicros)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("catalog: usage: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: usage: %w", err)
	}
	return out, nil
}
