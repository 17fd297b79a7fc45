package catalog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
)

// maxPendingRows bounds the ledger rows waiting for a flush; past it new
// entries lose their user, team and tags (ledger.add).
const maxPendingRows = 20_000

// ErrLedgerFull: the ledger's queue is at its bound, so call records are
// being dropped or usage summed without its attribution.
var ErrLedgerFull = errors.New("ledger queue full")

// refused reports whether err is the database refusing a value (a data
// exception or a constraint: PostgreSQL's SQLSTATE classes 22 and 23, such
// as invalid UTF-8; SQLite's TOOBIG, MISMATCH and CONSTRAINT), as opposed
// to a database that does not answer, which a later write may reach. A
// trigger's RAISE is neither: it is an operator (or a test) holding writes
// back for a while, so the entries are kept.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23")
	}
	var liteErr *sqlite.Error
	if errors.As(err, &liteErr) {
		const constraintTrigger = 19 | 7<<8          // SQLITE_CONSTRAINT_TRIGGER
		switch code := liteErr.Code(); code & 0xff { // the primary code of an extended one
		case 18, 20: // SQLITE_TOOBIG, SQLITE_MISMATCH
			return true
		case 19: // SQLITE_CONSTRAINT
			return code != constraintTrigger
		}
	}
	return false
}

// writeAlone writes each row of batch and each of calls in its own
// transaction, after a write of them all was refused. A row or record the
// database refuses alone is dropped, counted and reported. It stops at the
// first other error and returns what is left to write with it.
func (c *Catalog) writeAlone(ctx context.Context, batch map[usageKey]*usageSums, calls []CallRecord) (map[usageKey]*usageSums, []CallRecord, error) {
	l := c.led
	for _, k := range slices.SortedFunc(maps.Keys(batch), compareUsageKeys) {
		err := c.writeLedger(ctx, map[usageKey]*usageSums{k: batch[k]}, nil)
		if err != nil && !refused(err) {
			return batch, calls, err
		}
		if err != nil {
			l.mu.Lock()
			l.refusedRows++
			l.mu.Unlock()
			c.onFlushError(fmt.Errorf("catalog: ledger row of workspace %q, model %q dropped: %w", k.workspace, k.model, err))
		}
		delete(batch, k)
	}
	for len(calls) > 0 {
		err := c.writeLedger(ctx, nil, calls[:1])
		if err != nil && !refused(err) {
			return batch, calls, err
		}
		if err != nil {
			l.mu.Lock()
			l.refusedCalls++
			l.mu.Unlock()
			c.onFlushError(fmt.Errorf("catalog: call record %q dropped: %w", calls[0].RequestID, err))
		}
		calls = calls[1:]
	}
	return batch, calls, nil
}

// LedgerStats is the state of the ledger's queue.
type LedgerStats struct {
	// PendingRows and PendingCalls wait for the next flush.
	PendingRows, PendingCalls int
	// DroppedCalls were not kept because too many were waiting.
	DroppedCalls int64
	// FoldedRows are entries kept without their user, team and tags
	// because too many rows were waiting.
	FoldedRows int64
	// RefusedRows and RefusedCalls were dropped because the database
	// refused them even written alone.
	RefusedRows, RefusedCalls int64
}

// LedgerStats returns the state of the ledger's queue, for metrics.
func (c *Catalog) LedgerStats() LedgerStats {
	l := c.led
	l.mu.Lock()
	defer l.mu.Unlock()
	return LedgerStats{
		PendingRows: len(l.pending), PendingCalls: len(l.calls),
		DroppedCalls: l.droppedCalls, FoldedRows: l.foldedRows,
		RefusedRows: l.refusedRows, RefusedCalls: l.refusedCalls,
	}
}

// LedgerBacklog returns ErrLedgerFull while the ledger's queue is at its
// bound (call records dropped, usage losing its attribution), nil
// otherwise: a readiness check.
func (c *Catalog) LedgerBacklog(context.Context) error {
	s := c.LedgerStats()
	if s.PendingRows >= maxPendingRows || s.PendingCalls >= maxPendingCalls {
		return fmt.Errorf("catalog: %w: %d rows and %d call records waiting", ErrLedgerFull, s.PendingRows, s.PendingCalls)
	}
	return nil
}

// reportLosses reports, once each, the entries dropped or folded since the
// last report.
func (c *Catalog) reportLosses() {
	l := c.led
	l.mu.Lock()
	lost := l.droppedCalls + l.foldedRows
	fresh := lost > l.reported
	l.reported = lost
	dropped, folded := l.droppedCalls, l.foldedRows
	l.mu.Unlock()
	if fresh {
		c.onFlushError(fmt.Errorf("catalog: %w: %d call records dropped and %d entries kept without user, team and tags so far",
			ErrLedgerFull, dropped, folded))
	}
}
