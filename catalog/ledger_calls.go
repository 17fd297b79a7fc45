package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// DefaultCallRetention is how long call records are kept when
// Options.CallRetention is zero.
const DefaultCallRetention = 90 * 24 * time.Hour

// maxPendingCalls bounds the call records waiting for a database that does
// not answer; past it the newest are dropped (and counted), so an outage
// cannot grow the gateway's memory without bound. The ledger's sums are
// kept whatever happens: they are what budgets are reconciled against.
const maxPendingCalls = 100_000

// Call outcomes.
const (
	// OutcomeReported: settled at the usage the provider reported.
	OutcomeReported = "reported"
	// OutcomeEstimated: no usage was reported (or it was impossible), so
	// the reservation was charged.
	OutcomeEstimated = "estimated"
	// OutcomeSwept: never settled; the sweep charged the reservation at its
	// deadline.
	OutcomeSwept = "swept"
	// OutcomeCacheHit: answered from the response cache; no model worked,
	// so no tokens and no cost are recorded (each rule charged it per its
	// cache_hits).
	OutcomeCacheHit = "cache_hit"
	// OutcomeRefused, as CallQuery.Outcome, selects the refused calls:
	// those recorded with any other outcome (the gateway's names for a
	// refusal: rate_limited, busy, budget_exceeded, too_large, ...),
	// charged nothing.
	OutcomeRefused = "refused"
)

// Settled reports whether outcome is one of a settled call's
// (OutcomeReported, OutcomeEstimated, OutcomeSwept, OutcomeCacheHit): any
// other is a refusal's.
func Settled(outcome string) bool {
	return outcome == OutcomeReported || outcome == OutcomeEstimated || outcome == OutcomeSwept || outcome == OutcomeCacheHit
}

// CallRecord is one call: who made it, what was reserved and what was
// charged, or, for a call the gateway refused (charged nothing), its
// refusal's outcome. Counters only: never a prompt or an answer.
type CallRecord struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	RequestID string    `json:"request_id,omitempty"`
	Org       string    `json:"org"`
	Workspace string    `json:"workspace"`
	KeyID     string    `json:"key,omitempty"`
	User      string    `json:"user,omitempty"`
	Route     string    `json:"route,omitempty"`
	Model     string    `json:"model,omitempty"`
	// Provider names the deployment's provider that served the call (or
	// last failed it); empty when none was tried.
	Provider string `json:"provider,omitempty"`
	// Outcome is OutcomeReported, OutcomeEstimated, OutcomeSwept or
	// OutcomeCacheHit for a settled call, else the outcome of its refusal
	// as the gateway's metrics name it (rate_limited, budget_exceeded,
	// too_large, ...).
	Outcome string `json:"outcome"`
	// ReservedTokens and ReservedCost are what admission reserved.
	ReservedTokens    int64 `json:"reserved_tokens"`
	ReservedCost      int64 `json:"reserved_cost_micros"`
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	CostMicros        int64 `json:"cost_micros"`
	// CacheSavedMicros is, for OutcomeCacheHit, what the call the hit
	// replayed cost: what the response cache saved.
	CacheSavedMicros int64 `json:"cache_saved_micros,omitempty"`
	// SessionID is the Sluice session the call was charged to; empty for
	// a call made outside one.
	SessionID string `json:"session_id,omitempty"`
	// ConnectionID is, for a live connection and each response made on
	// it, the connection's request id; empty for an HTTP call.
	ConnectionID string `json:"connection_id,omitempty"`
	// AudioInputTokens and AudioOutputTokens are the audio parts of
	// InputTokens and OutputTokens (a live response's speech).
	AudioInputTokens  int64 `json:"audio_input_tokens,omitempty"`
	AudioOutputTokens int64 `json:"audio_output_tokens,omitempty"`
}

// RecordCall queues r to be written with the ledger's next write (the same
// group commit as RecordUsage). It never touches the database. With
// Options.CallRetention negative, records are not kept and RecordCall does
// nothing.
func (c *Catalog) RecordCall(r CallRecord) {
	if c.callRetention < 0 {
		return
	}
	r = c.callRecord(r)
	l := c.led
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) >= maxPendingCalls {
		l.droppedCalls++
		return
	}
	l.calls = append(l.calls, r)
	l.signal()
}

// callRecord is r as it is stored: its time and org filled in.
func (c *Catalog) callRecord(r CallRecord) CallRecord {
	r.At = c.entryTime(r.At)
	if r.Org == "" {
		r.Org = "default"
	}
	return r
}

// DroppedCalls returns how many call records were not kept because the
// database did not answer for too long.
func (c *Catalog) DroppedCalls() int64 {
	c.led.mu.Lock()
	defer c.led.mu.Unlock()
	return c.led.droppedCalls
}

// requeueCalls puts back the records of a failed write, before those
// queued since; l.mu is held.
func (l *ledger) requeueCalls(calls []CallRecord) {
	if len(calls) == 0 {
		return
	}
	merged := append(calls, l.calls...)
	if over := len(merged) - maxPendingCalls; over > 0 {
		l.droppedCalls += int64(over)
		merged = merged[:maxPendingCalls]
	}
	l.calls = merged
}

// callsPerInsert is the most call records one INSERT carries: one round
// trip per few hundred calls, well under either database's limit on
// statement parameters (21 a record).
const callsPerInsert = 256

// queueCalls queues, with queue, the statements that insert calls, many
// records per statement: a record at a time, the round trips of a busy
// gateway's records (hundreds a flush) would keep the ledger's write, and
// so its crash window, long.
func (c *Catalog) queueCalls(calls []CallRecord, queue func(query string, args ...any)) {
	const cols = 21
	for len(calls) > 0 {
		n := powerOfTwoRows(len(calls), callsPerInsert)
		var b strings.Builder
		b.WriteString(`INSERT INTO ` + c.tables + `call_records (at, request_id, org, workspace, key_id, user_id, route, model, provider, outcome,
			reserved_tokens, reserved_cost, input_tokens, output_tokens, cached_input_tokens, cost_micros, cache_saved_micros,
			session_id, connection_id, audio_input_tokens, audio_output_tokens) VALUES `)
		args := make([]any, 0, n*cols)
		for i := range calls[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			r := &calls[i]
			args = append(args, r.At.UnixNano(), r.RequestID, r.Org, r.Workspace, r.KeyID, r.User, r.Route, r.Model, r.Provider, r.Outcome,
				r.ReservedTokens, r.ReservedCost, r.InputTokens, r.OutputTokens, r.CachedInputTokens, r.CostMicros, r.CacheSavedMicros,
				r.SessionID, r.ConnectionID, r.AudioInputTokens, r.AudioOutputTokens)
		}
		queue(c.d.q(b.String()), args...)
		calls = calls[n:]
	}
}

// CallQuery selects call records.
type CallQuery struct {
	// Org keeps one org; empty keeps all.
	Org string
	// Workspace, KeyID, Model and SessionID keep the records that match;
	// empty keeps all.
	Workspace string
	KeyID     string
	Model     string
	SessionID string
	// Outcome keeps the records of one outcome, or with OutcomeRefused
	// every refusal; empty keeps all.
	Outcome string
	// Since and Until bound At: Since inclusive, Until exclusive. Zero
	// leaves that side open.
	Since, Until time.Time
	// BeforeID keeps records older than that id (the next page); zero
	// starts at the newest.
	BeforeID int64
	// Limit is the most records returned, newest first: 1 to
	// MaxCallLimit; zero means DefaultCallLimit.
	Limit int
}

// Limits of CallQuery.Limit.
const (
	DefaultCallLimit = 100
	MaxCallLimit     = 1000
)

// Calls returns the call records q selects, newest first. It reads what
// has been flushed.
func (c *Catalog) Calls(ctx context.Context, q CallQuery) ([]CallRecord, error) {
	limit := q.Limit
	if limit == 0 {
		limit = DefaultCallLimit
	}
	if limit < 0 || limit > MaxCallLimit {
		return nil, fmt.Errorf("catalog: calls: %w: limit %d is not between 1 and %d", ErrInvalid, q.Limit, MaxCallLimit)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return nil, fmt.Errorf("catalog: calls: %w: since %s is not before until %s", ErrInvalid, q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339))
	}
	where, args := q.filters()
	if q.BeforeID > 0 {
		where = append(where, "id < ?")
		args = append(args, q.BeforeID)
	}
	query := `SELECT id, at, request_id, org, workspace, key_id, user_id, route, model, provider, outcome,
		reserved_tokens, reserved_cost, input_tokens, output_tokens, cached_input_tokens, cost_micros, cache_saved_micros,
		session_id, connection_id, audio_input_tokens, audio_output_tokens FROM call_records`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := c.db.QueryContext(ctx, c.d.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: calls: %w", err)
	}
	defer rows.Close()
	var out []CallRecord
	for rows.Next() {
		var r CallRecord
		var at int64
		if err := rows.Scan(&r.ID, &at, &r.RequestID, &r.Org, &r.Workspace, &r.KeyID, &r.User, &r.Route, &r.Model, &r.Provider, &r.Outcome,
			&r.ReservedTokens, &r.ReservedCost, &r.InputTokens, &r.OutputTokens, &r.CachedInputTokens, &r.CostMicros, &r.CacheSavedMicros,
			&r.SessionID, &r.ConnectionID, &r.AudioInputTokens, &r.AudioOutputTokens); err != nil {
			return nil, fmt.Errorf("catalog: calls: %w", err)
		}
		r.At = time.Unix(0, at).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: calls: %w", err)
	}
	return out, nil
}

// filters are the WHERE conditions of q's filters but BeforeID, and their
// arguments.
func (q *CallQuery) filters() (where []string, args []any) {
	for _, f := range []struct{ col, v string }{{"org", q.Org}, {"workspace", q.Workspace}, {"key_id", q.KeyID}, {"model", q.Model}, {"session_id", q.SessionID}} {
		if f.v != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	switch q.Outcome {
	case "":
	case OutcomeRefused:
		where = append(where, "outcome NOT IN (?, ?, ?, ?)")
		args = append(args, OutcomeReported, OutcomeEstimated, OutcomeSwept, OutcomeCacheHit)
	default:
		where = append(where, "outcome = ?")
		args = append(args, q.Outcome)
	}
	if !q.Since.IsZero() {
		where = append(where, "at >= ?")
		args = append(args, q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		where = append(where, "at < ?")
		args = append(args, q.Until.UnixNano())
	}
	return where, args
}

// pruneChunk is the most call records one prune statement deletes, so that
// pruning a large backlog never holds the write lock for long.
const pruneChunk = 5000

// PruneCalls deletes the call records older than the retention at now and
// returns how many it deleted. The background pruner calls it; with a
// negative retention it deletes nothing.
func (c *Catalog) PruneCalls(ctx context.Context, now time.Time) (int64, error) {
	if c.callRetention < 0 {
		return 0, nil
	}
	cutoff := now.Add(-c.callRetention).UnixNano()
	var total int64
	for {
		res, err := c.db.ExecContext(ctx, c.d.q(`DELETE FROM call_records WHERE id IN
			(SELECT id FROM call_records WHERE at < ? ORDER BY at LIMIT ?)`), cutoff, pruneChunk)
		if err != nil {
			return total, fmt.Errorf("catalog: prune calls: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("catalog: prune calls: %w", err)
		}
		total += n
		if n < pruneChunk {
			return total, nil
		}
	}
}

// pruneInterval is how often the background pruner runs.
const pruneInterval = 10 * time.Minute

// pruneLoop prunes call records at start and every pruneInterval, until
// Close.
func (c *Catalog) pruneLoop() {
	defer close(c.pruned)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := c.PruneCalls(ctx, c.now()); err != nil {
			c.onFlushError(err)
		}
		cancel()
		select {
		case <-c.stop:
			return
		case <-time.After(pruneInterval):
		}
	}
}
