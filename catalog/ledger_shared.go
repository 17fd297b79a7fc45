package catalog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// LedgerRecord is what the ledger keeps of one settled call: its usage
// (RecordUsage) and its call record (RecordCall).
type LedgerRecord struct {
	Usage UsageEntry
	Call  CallRecord
}

// QueueRecords queues, with queue, the statements that add recs, each a
// LedgerRecord, to the ledger as RecordUsage and RecordCall would (the call
// records only when call records are kept), in the catalog's SQL dialect,
// the tables named with their schema. It touches no database: it is the
// pgstore.Recorder of a counter store in the catalog's database
// (SharesDatabase), which runs them in the transaction of the settlements
// recs record, so that the ledger and the counters commit together.
func (c *Catalog) QueueRecords(recs []any, queue func(query string, args ...any)) error {
	batch := make(map[usageKey]*usageSums, len(recs))
	var calls []CallRecord
	for _, rec := range recs {
		r, ok := rec.(LedgerRecord)
		if !ok {
			return fmt.Errorf("catalog: queue records: %w: a %T is not a LedgerRecord", ErrInvalid, rec)
		}
		addRow(batch, r.Usage.key(c.entryTime(r.Usage.At).UTC().Format(dayLayout)), r.Usage.sums())
		if c.callRetention >= 0 {
			calls = append(calls, c.callRecord(r.Call))
		}
	}
	c.queueUsage(batch, queue)
	c.queueCalls(calls, queue)
	return nil
}

// sharedDatabaseSQL tells which database a connection is in (its name and
// the server's start, telling two servers apart), which table the ledger's
// name is there, and whether the connection's user may write the ledger.
const sharedDatabaseSQL = `SELECT current_database(), (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint,
	coalesce(to_regclass($1)::oid::bigint, 0),
	to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL
		AND has_table_privilege(to_regclass($1), 'INSERT, UPDATE') AND has_table_privilege(to_regclass($2), 'INSERT')
		AND coalesce(has_sequence_privilege(pg_get_serial_sequence($2, 'id'), 'USAGE'), false)`

// SharesDatabase reports whether url, a PostgreSQL connection string,
// reaches the database the catalog is in, with a user that may write the
// ledger there: then a counter store on url can write the ledger in its
// own transactions (QueueRecords). Two URLs that differ (other parameters,
// another search_path, another host name for the same server) may share
// the database. It connects to url once; a catalog on SQLite shares none.
func (c *Catalog) SharesDatabase(ctx context.Context, url string) (bool, error) {
	if c.pgConfig == nil {
		return false, nil
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// The error may quote the URL, password and all.
		return false, fmt.Errorf("catalog: shares database: %w: cannot parse the connection URL", ErrInvalid)
	}
	ledger, calls := c.tables+"usage_ledger", c.tables+"call_records"
	type identity struct {
		database        string
		started, ledger int64
	}
	var own, theirs identity
	var writable bool
	if err := c.db.QueryRowContext(ctx, sharedDatabaseSQL, ledger, calls).Scan(&own.database, &own.started, &own.ledger, &writable); err != nil {
		return false, fmt.Errorf("catalog: shares database: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("catalog: shares database: connect %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sharedDatabaseSQL, ledger, calls).Scan(&theirs.database, &theirs.started, &theirs.ledger, &writable); err != nil {
		return false, fmt.Errorf("catalog: shares database: %w", err)
	}
	return own == theirs && writable, nil
}
