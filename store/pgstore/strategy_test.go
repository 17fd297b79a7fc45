package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
)

// stmtStore is the alternative pgstore did not take, kept to measure it:
// the same tables and lock order, but each admission and settlement is a
// transaction of plain statements sent from Go, the arithmetic done in Go.
// Pipelining (pgx.Batch) makes it two round trips: BEGIN and lock-and-read,
// then the writes and COMMIT; the rows stay locked across the client's turn.
// It handles rate and budget charges on counters that exist, which is what
// the benchmark needs, and nothing else.
type stmtStore struct{ pool *pgxpool.Pool }

const stmtLock = `SELECT tat, frac, drawn_at, used, reserved FROM sluice_counters
WHERE rule = $1 AND subject = $2 AND period = $3 FOR UPDATE`

func (s *stmtStore) Admit(ctx context.Context, _ time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	order := sortedCharges(&b)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	var read pgx.Batch
	read.Queue("BEGIN")
	read.Queue("SELECT sluice_now()")
	for _, i := range order {
		k := b.Charges[i].Key
		read.Queue(stmtLock, int64(k.Rule), k.Subject, k.Period)
	}
	br := conn.SendBatch(ctx, &read)
	rows, now, err := readLocked(br, len(order))
	if err = errors.Join(err, br.Close()); err != nil {
		return false, rollback(ctx, conn, err)
	}
	admitted := true
	var write pgx.Batch
	for j, i := range order {
		c, r := &b.Charges[i], rows[j]
		switch c.Kind {
		case sluice.KindRate:
			d1, l := new(big.Int), big.NewInt(c.Limit)
			d1.Mul(big.NewInt(r.tat-now), big.NewInt(r.drawnAt)).Add(d1, big.NewInt(r.frac))
			if d1.Sign() < 0 {
				d1.SetInt64(0)
			}
			d1.Add(d1, new(big.Int).Mul(big.NewInt(c.Amount), big.NewInt(int64(c.Window))))
			results[i].Allowed = d1.Cmp(new(big.Int).Mul(big.NewInt(c.BurstOrLimit()), big.NewInt(int64(c.Window)))) <= 0
			q, m := new(big.Int).QuoRem(d1, l, new(big.Int))
			write.Queue(`UPDATE sluice_counters SET tat = $4, frac = $5, drawn_at = $6, touched = $7
WHERE rule = $1 AND subject = $2 AND period = $3`, int64(c.Key.Rule), c.Key.Subject, c.Key.Period, now+q.Int64(), m.Int64(), c.Limit, now)
		case sluice.KindBudget:
			inUse := r.used + r.reserved
			results[i].Allowed = inUse+c.Amount <= c.Limit && (c.Amount > 0 || inUse < c.Limit)
			write.Queue(`UPDATE sluice_counters SET reserved = reserved + $4, period_end = $5, touched = $6
WHERE rule = $1 AND subject = $2 AND period = $3`, int64(c.Key.Rule), c.Key.Subject, c.Key.Period, c.Amount, c.PeriodEnd.UnixNano(), now)
		default:
			return false, rollback(ctx, conn, errors.New("stmtStore: only rate and budget charges"))
		}
		admitted = admitted && (results[i].Allowed || c.Shadow)
	}
	if !admitted {
		return false, rollback(ctx, conn, nil)
	}
	kinds, rules, subjects, periods, amounts, ends, release := reservationArrays(&b, order)
	write.Queue(`INSERT INTO sluice_reservations (batch_id, deadline, kind, rule, subject, period, amount, period_end, release)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, scramble(b.ID), now+int64(time.Minute), kinds, rules, subjects, periods, amounts, ends, release)
	write.Queue("COMMIT")
	if err := conn.SendBatch(ctx, &write).Close(); err != nil {
		return false, rollback(ctx, conn, err)
	}
	return true, nil
}

func (s *stmtStore) Settle(ctx context.Context, _ time.Time, b sluice.Batch) error {
	var order []int
	for _, i := range sortedCharges(&b) {
		if c := &b.Charges[i]; c.Kind != sluice.KindRate || c.Actual != c.Amount {
			order = append(order, i)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var read pgx.Batch
	read.Queue("BEGIN")
	read.Queue("SELECT sluice_now()")
	for _, i := range order {
		k := b.Charges[i].Key
		read.Queue(stmtLock, int64(k.Rule), k.Subject, k.Period)
	}
	read.Queue("DELETE FROM sluice_reservations WHERE batch_id = $1", scramble(b.ID))
	br := conn.SendBatch(ctx, &read)
	rows, now, err := readLocked(br, len(order))
	if err == nil {
		var tag interface{ RowsAffected() int64 }
		tag, err = br.Exec()
		if err == nil && tag.RowsAffected() == 0 {
			err = errors.New("settled already")
		}
	}
	if err = errors.Join(err, br.Close()); err != nil {
		return rollback(ctx, conn, err)
	}
	var write pgx.Batch
	for j, i := range order {
		c, r := &b.Charges[i], rows[j]
		switch c.Kind {
		case sluice.KindRate:
			d, l, w := new(big.Int), big.NewInt(c.Limit), big.NewInt(int64(c.Window))
			d.Mul(big.NewInt(r.tat-now), big.NewInt(r.drawnAt)).Add(d, big.NewInt(r.frac))
			if d.Sign() < 0 {
				d.SetInt64(0)
			}
			d.Add(d, new(big.Int).Mul(big.NewInt(c.Actual-c.Amount), w))
			if cap2 := new(big.Int).Mul(big.NewInt(2*c.BurstOrLimit()), w); d.Cmp(cap2) > 0 {
				d = cap2
			}
			if d.Sign() < 0 {
				d.SetInt64(0)
			}
			q, m := new(big.Int).QuoRem(d, l, new(big.Int))
			write.Queue(`UPDATE sluice_counters SET tat = $4, frac = $5, drawn_at = $6, touched = $7
WHERE rule = $1 AND subject = $2 AND period = $3`, int64(c.Key.Rule), c.Key.Subject, c.Key.Period, now+q.Int64(), m.Int64(), c.Limit, now)
		case sluice.KindBudget:
			write.Queue(`UPDATE sluice_counters SET reserved = greatest(0, reserved - $4), used = used + $5, touched = $6
WHERE rule = $1 AND subject = $2 AND period = $3`, int64(c.Key.Rule), c.Key.Subject, c.Key.Period, c.Amount, c.Actual, now)
		}
	}
	write.Queue("COMMIT")
	if err := conn.SendBatch(ctx, &write).Close(); err != nil {
		return rollback(ctx, conn, err)
	}
	return nil
}

func (s *stmtStore) Peek(context.Context, time.Time, sluice.Batch, []sluice.ChargeResult) error {
	return errors.New("stmtStore: no peek")
}

func (s *stmtStore) Sweep(context.Context, time.Time) (sluice.SweepResult, error) {
	return sluice.SweepResult{}, nil
}

func (s *stmtStore) Close() error { return nil }

// scramble is pgstore's batchKey, so that both strategies spread their
// reservation rows over the index alike.
func scramble(id uint64) int64 {
	id ^= id >> 31
	id *= 0x9e3779b97f4a7c15
	id ^= id >> 29
	return int64(id)
}

type lockedRow struct{ tat, frac, drawnAt, used, reserved int64 }

// readLocked reads the results of BEGIN, sluice_now() and n lock-and-read
// statements.
func readLocked(br pgx.BatchResults, n int) ([]lockedRow, int64, error) {
	if _, err := br.Exec(); err != nil {
		return nil, 0, err
	}
	var now int64
	if err := br.QueryRow().Scan(&now); err != nil {
		return nil, 0, err
	}
	rows := make([]lockedRow, n)
	for j := range rows {
		r := &rows[j]
		if err := br.QueryRow().Scan(&r.tat, &r.frac, &r.drawnAt, &r.used, &r.reserved); err != nil {
			return nil, 0, fmt.Errorf("lock counter: %w", err)
		}
	}
	return rows, now, nil
}

// rollback ends the connection's transaction and returns err.
func rollback(ctx context.Context, conn *pgxpool.Conn, err error) error {
	if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
		conn.Conn().PgConn().Close(ctx)
	}
	return err
}

func sortedCharges(b *sluice.Batch) []int {
	order := make([]int, len(b.Charges))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		a, c := b.Charges[x].Key, b.Charges[y].Key
		if a.Rule != c.Rule {
			if int64(a.Rule) < int64(c.Rule) {
				return -1
			}
			return 1
		}
		if s := strings.Compare(a.Subject, c.Subject); s != 0 {
			return s
		}
		return int(a.Period - c.Period)
	})
	return order
}

func reservationArrays(b *sluice.Batch, order []int) (kinds []int16, rules []int64, subjects []string, periods, amounts, ends []int64, release []bool) {
	for _, i := range order {
		c := &b.Charges[i]
		kind := int16(1)
		if c.Kind == sluice.KindBudget {
			kind = 2
		}
		kinds = append(kinds, kind)
		rules = append(rules, int64(c.Key.Rule))
		subjects = append(subjects, c.Key.Subject)
		periods = append(periods, c.Key.Period)
		amounts = append(amounts, c.Amount)
		ends = append(ends, c.PeriodEnd.UnixNano())
		release = append(release, c.OnExpiry == sluice.ExpiryRelease)
	}
	return
}

// BenchmarkAdmitStrategy compares, in one run, the two ways to run an
// admission and its settlement that pgstore chose between: one call of a
// PL/pgSQL function each (what pgstore does), or a transaction of plain
// statements from Go, pipelined into two round trips each (stmtStore). Same
// three-rule request, same tables, 32 callers, on distinct subjects and on
// one hot subject; over loopback, and through a proxy that delays each
// direction by 250 µs, like a network between a gateway and its database.
// See the package documentation for the figures.
func BenchmarkAdmitStrategy(b *testing.B) {
	schema := testSchema(b)
	admin := adminPool(b)
	ctx := context.Background()
	for _, network := range []struct {
		name  string
		delay time.Duration
	}{{"loopback", 0}, {"delayed-250us", 250 * time.Microsecond}} {
		fnApp, stmtApp := appName("pgstore-fn"), appName("pgstore-stmt")
		fnURL, stmtURL := withAppName(b, fnApp), withAppName(b, stmtApp)
		if network.delay > 0 {
			fnURL, stmtURL = viaProxy(b, fnURL, network.delay), viaProxy(b, stmtURL, network.delay)
		}
		fn := openStore(b, schema, pgstore.Options{URL: fnURL, MaxConns: benchConns})
		cfg, err := pgxpool.ParseConfig(stmtURL)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns = benchConns
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		// The statements create no counter: the function store creates
		// them for both, once, before anything is timed.
		if err := createCounters(ctx, fn, benchCallers+1); err != nil {
			b.Fatal(err)
		}
		for _, strategy := range []struct {
			name  string
			app   string
			store sluice.Store
		}{{"function", fnApp, fn}, {"statements", stmtApp, &stmtStore{pool}}} {
			l, err := sluice.New(sluice.Options{Store: strategy.store, Rules: benchRules})
			if err != nil {
				b.Fatal(err)
			}
			admitSettle := func(subject string) error {
				r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: subject, Key: subject},
					Max: sluice.Usage{InputTokens: 100, OutputTokens: 100}})
				if err != nil {
					return err
				}
				return r.Settle(ctx, sluice.Usage{InputTokens: 100, OutputTokens: 37})
			}
			name := "net=" + network.name + "/strategy=" + strategy.name
			b.Run(name+"/subjects=distinct", func(b *testing.B) {
				parallel(b, admin, strategy.app, func(caller int) error { return admitSettle(fmt.Sprintf("subject-%d", caller)) })
			})
			b.Run(name+"/subjects=hot", func(b *testing.B) {
				parallel(b, admin, strategy.app, func(int) error { return admitSettle("hot") })
			})
		}
	}
}

// viaProxy returns rawURL pointing at a proxy that delays each direction.
func viaProxy(b *testing.B, rawURL string, delay time.Duration) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		b.Fatal(err)
	}
	p := startDelayProxy(b, u.Host, delay)
	u.Host = p.addr
	return u.String()
}

// createCounters admits and settles once for "hot" and subject-1 to n with
// the benchmark's rules, which creates their counters.
func createCounters(ctx context.Context, s sluice.Store, n int) error {
	l, err := sluice.New(sluice.Options{Store: s, Rules: benchRules})
	if err != nil {
		return err
	}
	for i := range n + 1 {
		subject := fmt.Sprintf("subject-%d", i)
		if i == 0 {
			subject = "hot"
		}
		r, err := l.Admit(ctx, sluice.Request{Identity: sluice.Identity{Workspace: subject, Key: subject}, Max: sluice.Usage{InputTokens: 1}})
		if err != nil {
			return err
		}
		if err := r.Settle(ctx, sluice.Usage{InputTokens: 1}); err != nil {
			return err
		}
	}
	return nil
}
