package catalog

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// WatchPolicy calls changed soon after a rule or an override changes in the
// database, however it was changed: through this Catalog, another process,
// or a statement run against the database directly. On PostgreSQL it
// listens for the notifications a trigger sends (migration 0007),
// reconnecting after a failure; on SQLite it polls PRAGMA data_version,
// which changes when another connection commits, every poll (100 ms when
// zero). Calls to changed may come in bursts and for changes to other
// tables (SQLite); it should only schedule a refresh. It returns when ctx
// is done; errors are given to onError (which may be nil) and retried.
func (c *Catalog) WatchPolicy(ctx context.Context, poll time.Duration, changed func(), onError func(error)) {
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	report := func(err error) {
		if onError != nil && ctx.Err() == nil {
			onError(err)
		}
	}
	for ctx.Err() == nil {
		var err error
		if c.pgConfig != nil {
			err = c.listen(ctx, changed)
		} else {
			err = c.pollDataVersion(ctx, poll, changed)
		}
		if err != nil {
			report(err)
		}
		// A watch that failed may have missed changes: refresh, then try
		// again after a pause.
		changed()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// listen holds a connection of its own that LISTENs on sluice_catalog and
// calls changed for every notification about the catalog's schema.
func (c *Catalog) listen(ctx context.Context, changed func()) error {
	conn, err := pgx.ConnectConfig(ctx, c.pgConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `LISTEN sluice_catalog`); err != nil {
		return err
	}
	// Changes made before LISTEN took effect were not notified.
	changed()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == schema {
			changed()
		}
	}
}

// pollDataVersion reads PRAGMA data_version on one connection every poll
// and calls changed when it moves.
func (c *Catalog) pollDataVersion(ctx context.Context, poll time.Duration, changed func()) error {
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	version := func() (int64, error) {
		var v int64
		err := conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v)
		return v, err
	}
	last, err := version()
	if err != nil {
		return err
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		v, err := version()
		if err != nil {
			return err
		}
		if v != last {
			last = v
			changed()
		}
	}
}
