package catalog

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"
)

// UsageEntry is what one request (or several) used, as counted by the
// gateway after settlement, or what the sweep charged for a reservation
// left unsettled. It carries counters only: never a prompt or an answer.
type UsageEntry struct {
	// Org is the org of Workspace; empty means "default".
	Org       string
	Workspace string
	Route     string
	Model     string
	// KeyID, User and Team attribute the usage to the key that made the
	// call and the user and team it was made for.
	KeyID string
	User  string
	Team  string
	// Tags are the request's X-Sluice-Tags; their order does not count.
	Tags []string
	// Swept marks a charge the sweep made for a reservation that was never
	// settled (a crash, a settlement that never reached the store).
	Swept bool
	// CacheHit marks a call answered from the response cache (its row's
	// kind is cache_hit), and CacheSavedMicros is what the call it
	// replayed cost.
	CacheHit         bool
	CacheSavedMicros int64
	// At places the entry on a UTC day; zero means now.
	At                time.Time
	Requests          int64
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	// Tokens is what token budgets counted; zero means InputTokens plus
	// OutputTokens. A swept entry knows only this total.
	Tokens     int64
	CostMicros int64
}

// UsageQuery selects and groups ledger rows.
type UsageQuery struct {
	// Org keeps one org; empty keeps all.
	Org string
	// Workspace keeps one workspace (of Org, or of any org when Org is
	// empty); empty keeps all.
	Workspace string
	// Key keeps the usage of one API key, in whichever workspace it was
	// charged (a service key's, in those it asserts); empty keeps all.
	Key string
	// From and To bound the UTC days kept, both inclusive; only their date
	// (in UTC) counts. Zero leaves that side open.
	From, To time.Time
	// GroupBy names the columns rows are grouped by: any of UsageGroups.
	// Empty sums everything into one row. Grouped by "tag", a call with
	// several tags counts in each of their rows (and one without in the
	// row of tag ""), so those rows may sum to more than the total.
	GroupBy []string
}

// UsageGroups are the groupings UsageQuery accepts.
var UsageGroups = []string{"org", "workspace", "day", "route", "model", "key", "user", "team", "tag", "kind"}

// UsageRow is a sum of ledger rows. Columns not grouped by are empty,
// except Org, Workspace and Key when the query named them.
type UsageRow struct {
	Org       string `json:"org,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	Day       string `json:"day,omitempty"`
	Route     string `json:"route,omitempty"`
	Model     string `json:"model,omitempty"`
	Key       string `json:"key,omitempty"`
	User      string `json:"user,omitempty"`
	Team      string `json:"team,omitempty"`
	Tag       string `json:"tag,omitempty"`
	// Kind is "settled", "swept" or "cache_hit" when grouped by kind.
	Kind              string `json:"kind,omitempty"`
	Requests          int64  `json:"requests"`
	InputTokens       int64  `json:"input_tokens"`
	OutputTokens      int64  `json:"output_tokens"`
	CachedInputTokens int64  `json:"cached_input_tokens"`
	// Tokens is what token budgets counted: input plus output tokens of
	// settled calls, and the whole charge of swept reservations.
	Tokens     int64 `json:"tokens"`
	CostMicros int64 `json:"cost_micros"`
	// SweptRequests counts the reservations among Requests that the sweep
	// charged.
	SweptRequests int64 `json:"swept_requests"`
	// CacheHits counts the calls among Requests answered from the
	// response cache, and CacheSavedMicros what they saved.
	CacheHits        int64 `json:"cache_hits"`
	CacheSavedMicros int64 `json:"cache_saved_micros"`
}

const dayLayout = "2006-01-02"

// Ledger row kinds.
const (
	kindSettled = "settled"
	kindSwept   = "swept"
	kindHit     = "cache_hit"
)

type usageKey struct {
	org, workspace, day, route, model string
	key, user, team, tags, kind       string
}

type usageSums struct{ requests, input, output, cached, tokens, cost, saved int64 }

func (s *usageSums) add(o usageSums) {
	s.requests += o.requests
	s.input += o.input
	s.output += o.output
	s.cached += o.cached
	s.tokens += o.tokens
	s.cost += o.cost
	s.saved += o.saved
}

// ledger sums usage in memory, and queues call records, between flushes.
type ledger struct {
	flushMu sync.Mutex // one flush at a time
	// stmts are the flush's prepared statements by their text (see
	// execPrepared); under flushMu.
	stmts map[string]*sql.Stmt

	mu      sync.Mutex
	pending map[usageKey]*usageSums
	calls   []CallRecord
	// droppedCalls counts call records not kept because too many were
	// waiting for a database that did not answer.
	droppedCalls int64
	// foldedRows counts entries summed into their row without user, team
	// and tags because maxPendingRows rows were waiting (see add).
	foldedRows int64
	// refusedRows and refusedCalls count the ledger rows and call records
	// dropped because the database refused them even alone.
	refusedRows, refusedCalls int64
	// reported is the count of dropped, folded and refused entries last
	// logged, so that the flusher logs each increase once.
	reported int64
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
// are summed in memory per (org, workspace, day, route, model, key, user,
// team, tags, kind) and written by the background flusher within a few
// milliseconds (ledgerGroupDelay; the entries recorded while it writes go
// in its next write), by Flush, or by Close. Entries recorded after Close
// are lost.
func (c *Catalog) RecordUsage(e UsageEntry) {
	at := c.entryTime(e.At)
	l := c.led
	day := floorDiv(at.Unix(), 86400)
	sums := e.sums()
	l.mu.Lock()
	defer l.mu.Unlock()
	if day != l.lastDay {
		l.lastDay, l.lastDayStr = day, at.UTC().Format(dayLayout)
	}
	l.add(e.key(l.lastDayStr), sums)
	l.signal()
}

// entryTime is when an entry or record at at happened: now when at is
// zero.
func (c *Catalog) entryTime(at time.Time) time.Time {
	if at.IsZero() {
		return c.now()
	}
	return at
}

// key is the key of e's ledger row on day.
func (e *UsageEntry) key(day string) usageKey {
	org := e.Org
	if org == "" {
		org = "default"
	}
	kind := kindSettled
	switch {
	case e.Swept:
		kind = kindSwept
	case e.CacheHit:
		kind = kindHit
	}
	return usageKey{org, e.Workspace, day, e.Route, e.Model, e.KeyID, e.User, e.Team, tagSet(e.Tags), kind}
}

// sums are what e adds to its ledger row.
func (e *UsageEntry) sums() usageSums {
	tokens := e.Tokens
	if tokens == 0 {
		tokens = satAdd(e.InputTokens, e.OutputTokens)
	}
	return usageSums{e.Requests, e.InputTokens, e.OutputTokens, e.CachedInputTokens, tokens, e.CostMicros, e.CacheSavedMicros}
}

// add adds sums to the pending row k; l.mu is held. Past maxPendingRows
// rows waiting (a database that does not answer, and user, team or tag
// values that differ call after call), an entry for a new row goes in the
// row of its workspace, route and model without user, team and tags: the
// totals are kept, the attribution is lost and counted, and the memory
// stays bounded by what the trusted records name.
func (l *ledger) add(k usageKey, sums usageSums) {
	if len(l.pending) >= maxPendingRows && l.pending[k] == nil {
		k.user, k.team, k.tags = "", "", ""
		l.foldedRows++
	}
	addRow(l.pending, k, sums)
}

// addRow adds sums to the row k of batch.
func addRow(batch map[usageKey]*usageSums, k usageKey, sums usageSums) {
	if s := batch[k]; s != nil {
		s.add(sums)
		return
	}
	fresh := new(usageSums) // allocated only for a new row, not per entry
	*fresh = sums
	batch[k] = fresh
}

// signal wakes the flusher; l.mu is held.
func (l *ledger) signal() {
	select {
	case l.wake <- struct{}{}:
	default: // the flusher is awake already
	}
}

// tagSet returns tags as the ledger stores them: sorted, without
// duplicates, joined by commas (a tag never holds one: X-Sluice-Tags
// splits on them).
func tagSet(tags []string) string {
	switch len(tags) {
	case 0:
		return ""
	case 1:
		return tags[0]
	}
	s := slices.Clone(tags)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}

func satAdd(a, b int64) int64 {
	if s := a + b; (s > a) == (b > 0) {
		return s
	}
	if b > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Flush writes the ledger's in-memory sums and the queued call records to
// the database in one transaction. On failure they are kept for the next
// flush. The gateway calls it at shutdown (Close does too).
func (c *Catalog) Flush(ctx context.Context) error {
	l := c.led
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	batch, calls := l.pending, l.calls
	if len(batch) == 0 && len(calls) == 0 {
		l.mu.Unlock()
		return nil
	}
	l.pending = make(map[usageKey]*usageSums, len(batch))
	l.calls = make([]CallRecord, 0, min(len(calls), callsPerInsert)) // as many as last time, most likely
	l.mu.Unlock()

	err := c.writeLedger(ctx, batch, calls)
	if err != nil && refused(err) {
		// One entry the database refuses must not hold back the others:
		// write each alone and drop those it still refuses.
		batch, calls, err = c.writeAlone(ctx, batch, calls)
	}
	if err != nil {
		l.mu.Lock()
		for k, s := range batch {
			l.add(k, *s)
		}
		l.requeueCalls(calls)
		l.mu.Unlock()
		return fmt.Errorf("catalog: flush usage: %w", err)
	}
	return nil
}

// writeLedger writes batch and calls in one transaction.
func (c *Catalog) writeLedger(ctx context.Context, batch map[usageKey]*usageSums, calls []CallRecord) error {
	return c.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		exec := func(query string, args ...any) {
			if err == nil {
				err = c.execPrepared(ctx, tx, query, args)
			}
		}
		c.queueUsage(batch, exec)
		c.queueCalls(calls, exec)
		return err
	})
}

// rowsPerUpsert is the most ledger rows one upsert carries (17 parameters
// a row, under either database's limit).
const rowsPerUpsert = 256

// powerOfTwoRows is the rows of the next statement for pending rows: the
// largest power of two not above pending nor limit.
func powerOfTwoRows(pending, limit int) int {
	return 1 << (bits.Len(uint(min(pending, limit))) - 1)
}

// execPrepared runs query with args in tx through the statement prepared
// for query by an earlier flush, or prepares it; l.flushMu is held. The
// ledger's statements carry a power of two of rows each (powerOfTwoRows;
// 37 rows: 32, 4 and 1), so that a few prepared statements serve every
// flush: compiling a multi-row statement anew each flush cost SQLite about
// as much as executing it.
func (c *Catalog) execPrepared(ctx context.Context, tx *sql.Tx, query string, args []any) error {
	l := c.led
	stmt := l.stmts[query]
	if stmt == nil {
		var err error
		if stmt, err = c.db.PrepareContext(ctx, query); err != nil {
			return err
		}
		if l.stmts == nil {
			l.stmts = map[string]*sql.Stmt{}
		}
		l.stmts[query] = stmt
	}
	_, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
	return err
}

// closeStmts closes the flush's prepared statements.
func (l *ledger) closeStmts() {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	for _, stmt := range l.stmts {
		_ = stmt.Close() // closing the database frees them anyway
	}
	l.stmts = nil
}

// queueUsage queues, with queue, the statements that add batch to the
// ledger's rows, many rows per statement: a flush is a few round trips
// however many rows it writes, so that its write, the window a crash can
// lose, stays short. A batch holds each key once, as one upsert statement
// requires; its rows go in key order, the one order in which every writer
// (replicas flushing, counter stores writing the ledger with their
// settlements) locks them, so that none deadlocks another.
func (c *Catalog) queueUsage(batch map[usageKey]*usageSums, queue func(query string, args ...any)) {
	head := `INSERT INTO ` + c.tables + `usage_ledger
		(org, workspace, day, route, model, key_id, user_id, team, tags, kind,
			requests, input_tokens, output_tokens, cached_input_tokens, tokens, cost_micros, cache_saved_micros) VALUES `
	const tail = ` ON CONFLICT (org, workspace, day, route, model, key_id, user_id, team, tags, kind) DO UPDATE SET
			requests = usage_ledger.requests + excluded.requests,
			input_tokens = usage_ledger.input_tokens + excluded.input_tokens,
			output_tokens = usage_ledger.output_tokens + excluded.output_tokens,
			cached_input_tokens = usage_ledger.cached_input_tokens + excluded.cached_input_tokens,
			tokens = usage_ledger.tokens + excluded.tokens,
			cost_micros = usage_ledger.cost_micros + excluded.cost_micros,
			cache_saved_micros = usage_ledger.cache_saved_micros + excluded.cache_saved_micros`
	keys := slices.SortedFunc(maps.Keys(batch), compareUsageKeys)
	for len(keys) > 0 {
		n := powerOfTwoRows(len(keys), rowsPerUpsert)
		var b strings.Builder
		b.WriteString(head)
		args := make([]any, 0, n*17) // the queued statement keeps its arguments
		for i, k := range keys[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			s := batch[k]
			args = append(args, k.org, k.workspace, k.day, k.route, k.model, k.key, k.user, k.team, k.tags, k.kind,
				s.requests, s.input, s.output, s.cached, s.tokens, s.cost, s.saved)
		}
		b.WriteString(tail)
		queue(c.d.q(b.String()), args...)
		keys = keys[n:]
	}
}

// compareUsageKeys orders ledger rows by their primary key's columns.
func compareUsageKeys(a, b usageKey) int {
	return cmp.Or(strings.Compare(a.org, b.org), strings.Compare(a.workspace, b.workspace), strings.Compare(a.day, b.day),
		strings.Compare(a.route, b.route), strings.Compare(a.model, b.model), strings.Compare(a.key, b.key),
		strings.Compare(a.user, b.user), strings.Compare(a.team, b.team), strings.Compare(a.tags, b.tags),
		strings.Compare(a.kind, b.kind))
}

// ledgerGroupDelay is how long the flusher lets entries gather before a
// write: one commit per 20 ms however many calls settle, the most a crash
// can lose of a journaled ledger. A write costs about 100 µs of CPU besides
// 7 µs per call record (BenchmarkLedgerWrite, groups of 20 and 100): at
// 1,000 to 5,000 calls a second, that fixed cost is 5 to 1 µs a call in
// groups of 20 ms (it was 20 to 4 in groups of 5 ms), and 20 ms is far
// inside the 250 ms of calls TestServe_LedgerSurvivesKill9 allows.
const ledgerGroupDelay = 20 * time.Millisecond

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
		c.reportLosses()
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
