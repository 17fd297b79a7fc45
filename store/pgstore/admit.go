package pgstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Kinds as the SQL functions number them.
const (
	kindRate        int16 = 1
	kindBudget      int16 = 2
	kindConcurrency int16 = 3
)

func kindOf(k sluice.Kind) int16 {
	switch k {
	case sluice.KindRate:
		return kindRate
	case sluice.KindBudget:
		return kindBudget
	}
	return kindConcurrency
}

// sweepChunk is how many reservations one sluice_sweep call settles, and how
// many expired leases and idle counters one sluice_cleanup call deletes.
const sweepChunk = 500

// idleGrace is how long a counter stays idle before the sweep drops it, so
// that a subject seen every few minutes does not pay for creating it again.
const idleGrace = 10 * time.Minute

const (
	admitSQL = `SELECT admitted, allowed, remaining, used, retry_after, reset_at
FROM sluice_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`
	sweepSQL   = `SELECT reservations, charged, released, swept FROM sluice_sweep($1, $2, $3)`
	cleanupSQL = `SELECT leases, counters FROM sluice_cleanup($1, $2, $3, $4)`
)

// args holds one Peek's charges as the arrays sluice_admit takes, in key
// order, and the results it returns.
type args struct {
	order                            []int // order[j] is the index in the batch of the j-th charge sent
	kind                             []int16
	rule, period                     []int64
	subject                          []string
	limit, burst, window, periodEnd  []int64
	amount                           []int64
	shadow, release                  []bool
	allowed                          []bool
	remaining, used, retry, resetAts []int64
}

var argsPool = sync.Pool{New: func() any { return new(args) }}

// load fills a with the charges of b, sorted by
// (rule, subject, period): the one order in which every transaction locks
// counter rows, so that none can deadlock another. The SQL side sorts the
// same way (signed rule, bytewise subject).
func (a *args) load(b *sluice.Batch) {
	a.order = a.order[:0]
	for i := range b.Charges {
		a.order = append(a.order, i)
	}
	// Insertion sort: batches hold a handful of charges.
	for j := 1; j < len(a.order); j++ {
		for k := j; k > 0 && keyLess(&b.Charges[a.order[k]].Key, &b.Charges[a.order[k-1]].Key); k-- {
			a.order[k], a.order[k-1] = a.order[k-1], a.order[k]
		}
	}
	n := len(a.order)
	a.kind = resize(a.kind, n)
	a.rule, a.period, a.subject = resize(a.rule, n), resize(a.period, n), resize(a.subject, n)
	a.limit, a.burst, a.window, a.periodEnd = resize(a.limit, n), resize(a.burst, n), resize(a.window, n), resize(a.periodEnd, n)
	a.amount = resize(a.amount, n)
	a.shadow, a.release = resize(a.shadow, n), resize(a.release, n)
	for j, i := range a.order {
		c := &b.Charges[i]
		a.kind[j] = kindOf(c.Kind)
		a.rule[j] = int64(c.Key.Rule)
		a.subject[j] = c.Key.Subject
		a.period[j] = c.Key.Period
		limit, amount, _ := budgetFigures(c)
		a.limit[j] = limit
		a.burst[j] = c.BurstOrLimit()
		a.window[j] = int64(c.Window)
		a.periodEnd[j] = 0
		if !c.PeriodEnd.IsZero() {
			a.periodEnd[j] = c.PeriodEnd.UnixNano()
		}
		a.amount[j] = amount
		a.shadow[j] = c.Shadow
		a.release[j] = c.OnExpiry == sluice.ExpiryRelease
	}
}

// batchKey is the key of a batch's reservation and lease rows: its ID
// scrambled by a bijection. A Limiter numbers its batches in sequence, and
// sequential keys would send every insert of every replica to the same last
// page of the primary key index, where the inserting sessions queue for it.
func batchKey(id uint64) int64 {
	id ^= id >> 31
	id *= 0x9e3779b97f4a7c15 // odd: invertible modulo 2^64
	id ^= id >> 29
	return int64(id)
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func keyLess(x, y *sluice.CounterKey) bool {
	if x.Rule != y.Rule {
		return int64(x.Rule) < int64(y.Rule)
	}
	if c := strings.Compare(x.Subject, y.Subject); c != 0 {
		return c < 0
	}
	return x.Period < y.Period
}

// Admit checks every charge of b and applies all of them or none, in one
// transaction and one round trip, shared with the Admit and Settle calls
// that arrive while another call of this Store is running (group commit).
// The op is given a copy of the batch, and results of its own: one whose
// caller gave up may still be in a group's call.
func (s *Store) Admit(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	if len(b.Charges) == 0 {
		return true, nil
	}
	b.Charges = slices.Clone(b.Charges)
	o := &op{now: now, b: b, order: sortedCharges(&b, nil), results: make([]sluice.ChargeResult, len(b.Charges))}
	if err := s.run(ctx, o); err != nil {
		if o.sent && mayHaveRun(err) {
			s.cancelLater(now, &b)
		}
		return false, fmt.Errorf("pgstore: admit: %w", err)
	}
	copy(results, o.results)
	return o.admitted, nil
}

// Peek writes what each of b's charges would find, without charging or
// locking.
func (s *Store) Peek(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) error {
	if len(b.Charges) == 0 {
		return nil
	}
	if err := s.peek(ctx, now, &b, results); err != nil {
		return fmt.Errorf("pgstore: peek: %w", err)
	}
	return nil
}

// peek calls 0001's sluice_admit, which only reads when p_peek is set: no
// lock, no write, no commit to share.
func (s *Store) peek(ctx context.Context, now time.Time, b *sluice.Batch, results []sluice.ChargeResult) error {
	a := argsPool.Get().(*args)
	defer argsPool.Put(a)
	a.load(b)
	var ttl int64
	if !b.Deadline.IsZero() {
		ttl = int64(b.Deadline.Sub(now))
	}
	var admitted bool
	err := s.call(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, admitSQL, s.now(now), true, batchKey(b.ID), ttl,
			a.kind, a.rule, a.subject, a.period, a.limit, a.burst, a.window, a.periodEnd,
			a.amount, a.shadow, a.release,
		).Scan(&admitted, &a.allowed, &a.remaining, &a.used, &a.retry, &a.resetAts)
	})
	if err != nil {
		return err
	}
	if len(a.allowed) != len(a.order) {
		return fmt.Errorf("sluice_admit returned %d results for %d charges", len(a.allowed), len(a.order))
	}
	for j, i := range a.order {
		results[i] = resultOf(&b.Charges[i], a.allowed[j], a.remaining[j], a.used[j], a.retry[j], a.resetAts[j])
	}
	return nil
}

// resultOf is the result of charge c as sluice_admit or sluice_apply
// returned it: a budget resets at its period's end.
func resultOf(c *sluice.Charge, allowed bool, remaining, used, retryAfter, resetAt int64) sluice.ChargeResult {
	r := sluice.ChargeResult{Allowed: allowed, Remaining: remaining, Used: used, RetryAfter: time.Duration(retryAfter)}
	switch {
	case c.Kind == sluice.KindBudget:
		r.ResetAt = c.PeriodEnd
	case resetAt != 0:
		r.ResetAt = time.Unix(0, resetAt)
	}
	return r
}

// needsSettling reports whether settling c changes anything: a rate charge
// whose actual equals its amount leaves its bucket as it is.
func needsSettling(c *sluice.Charge) bool {
	return c.Kind != sluice.KindRate || c.Actual != c.Amount
}

// Settle applies each charge's Actual in place of its Amount and frees the
// batch's leases, in one transaction, shared as Admit's is; it returns after
// that transaction's commit. A batch with a budget charge is settled only
// while its reservation row exists, so settling twice, or after the sweep,
// does nothing. A record ctx carries (WithRecord) is written in the same
// transaction when the settlement applies, even one that changes no
// counter. The op is given a copy of the batch, as Admit's is.
func (s *Store) Settle(ctx context.Context, now time.Time, b sluice.Batch) error {
	order := sortedCharges(&b, needsSettling)
	rec := s.recordOf(ctx)
	if len(order) == 0 && rec == nil {
		return nil
	}
	b.Charges = slices.Clone(b.Charges)
	if err := s.run(ctx, &op{settle: true, now: now, b: b, order: order, rec: rec}); err != nil {
		return fmt.Errorf("pgstore: settle: %w", err)
	}
	return nil
}

// Sweep settles the reservations past their deadline, sweepChunk per
// transaction, then deletes some expired leases and idle counters. Any
// number of replicas may sweep at once: each reservation is settled by one.
func (s *Store) Sweep(ctx context.Context, now time.Time) (sluice.SweepResult, error) {
	res, _, err := s.sweep(ctx, now, false)
	return res, err
}

// SweepReport is Sweep, and tells what it settled.
func (s *Store) SweepReport(ctx context.Context, now time.Time) (sluice.SweepResult, []sluice.Batch, error) {
	return s.sweep(ctx, now, true)
}

// sweptRow is a reservation sluice_sweep reports: its charges as admitted.
type sweptRow struct {
	Kind    []int16  `json:"kind"`
	Rule    []int64  `json:"rule"`
	Subject []string `json:"subject"`
	Period  []int64  `json:"period"`
	Amount  []int64  `json:"amount"`
	Release []bool   `json:"release"`
}

func (s *Store) sweep(ctx context.Context, now time.Time, report bool) (sluice.SweepResult, []sluice.Batch, error) {
	var res sluice.SweepResult
	var expired []sluice.Batch
	for {
		var n, charged, released int
		var rows []sweptRow
		err := s.call(ctx, func(ctx context.Context) error {
			rows = nil
			return s.pool.QueryRow(ctx, sweepSQL, s.now(now), sweepChunk, report).Scan(&n, &charged, &released, &rows)
		})
		if err != nil {
			return res, expired, fmt.Errorf("pgstore: sweep: %w", err)
		}
		for _, r := range rows {
			expired = append(expired, r.expired())
		}
		res.Reservations += n
		res.Charged += charged
		res.Released += released
		if n < sweepChunk {
			break
		}
	}
	err := s.call(ctx, func(ctx context.Context) error {
		var leases, counters int
		return s.pool.QueryRow(ctx, cleanupSQL, s.now(now), sweepChunk, int64(idleGrace), int64(rand.Uint64())).Scan(&leases, &counters)
	})
	if err != nil {
		return res, expired, fmt.Errorf("pgstore: sweep: clean up: %w", err)
	}
	return res, expired, nil
}

// expired describes r for SweepReport: a budget charge settled at its
// amount unless its rule releases it; leases charge nothing.
func (r *sweptRow) expired() sluice.Batch {
	var e sluice.Batch
	for i := range r.Kind {
		if i >= len(r.Rule) || i >= len(r.Subject) || i >= len(r.Period) || i >= len(r.Amount) || i >= len(r.Release) {
			break
		}
		c := sluice.Charge{Key: sluice.CounterKey{Rule: uint64(r.Rule[i]), Subject: r.Subject[i], Period: r.Period[i]}}
		switch r.Kind[i] {
		case kindBudget:
			c.Kind = sluice.KindBudget
			if !r.Release[i] {
				c.Actual = r.Amount[i]
			}
		case kindRate:
			c.Kind = sluice.KindRate
		default:
			c.Kind = sluice.KindConcurrency
		}
		e.Charges = append(e.Charges, c)
	}
	return e
}
