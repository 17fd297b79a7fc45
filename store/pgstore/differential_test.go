package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/pgstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestDifferential_SameResultsAsMemstore drives pgstore (time pinned) and
// memstore with the same random admissions, peeks, settlements and sweeps,
// directly through the Store interface, and requires the same decision and
// the same result fields for every charge. Limits change under live
// counters, shadow charges go over their limits, refused batches must leave
// nothing behind: what the conformance suite does not reach.
func TestDifferential_SameResultsAsMemstore(t *testing.T) {
	t.Parallel()
	pg := openStore(t, testSchema(t), pgstore.Options{PinTime: true})
	ctx := context.Background()
	admin := adminPool(t)
	run := 0
	rapid.Check(t, func(t *rapid.T) {
		run++
		mem := memstore.New(memstore.Options{})
		now := storetest.Start
		nextID := uint64(run) << 32
		type open struct{ mem, pg *sluice.Batch }
		var opened []open

		// A handful of counters, each with a fixed kind, so that batches
		// meet on them.
		type counter struct {
			key    sluice.CounterKey
			kind   sluice.Kind
			window time.Duration
		}
		counters := make([]counter, rapid.IntRange(1, 5).Draw(t, "counters"))
		for i := range counters {
			c := &counters[i]
			c.kind = rapid.SampledFrom([]sluice.Kind{sluice.KindRate, sluice.KindBudget, sluice.KindConcurrency}).Draw(t, "kind")
			c.key = sluice.CounterKey{Rule: rapid.Uint64().Draw(t, "rule"), Subject: fmt.Sprintf("run%d-%d", run, i)}
			c.window = time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "window"))
		}
		charges := func(label string) []sluice.Charge {
			picked := rapid.SliceOfNDistinct(rapid.IntRange(0, len(counters)-1), 1, len(counters), rapid.ID[int]).Draw(t, label)
			var out []sluice.Charge
			for _, i := range picked {
				c := counters[i]
				ch := sluice.Charge{Key: c.key, Kind: c.kind, Window: c.window, Shadow: rapid.IntRange(0, 4).Draw(t, "shadow") == 0}
				switch c.kind {
				case sluice.KindRate:
					ch.Limit = rapid.Int64Range(1, 1000).Draw(t, "limit")
					ch.Burst = rapid.Int64Range(0, 1500).Draw(t, "burst")
					ch.Amount = rapid.Int64Range(0, ch.BurstOrLimit()+ch.BurstOrLimit()/4+1).Draw(t, "amount")
				case sluice.KindBudget:
					ch.Limit = rapid.Int64Range(1, 5000).Draw(t, "limit")
					ch.Amount = rapid.Int64Range(0, ch.Limit).Draw(t, "amount")
					ch.PeriodEnd = storetest.Start.Add(400 * 24 * time.Hour)
					if rapid.Bool().Draw(t, "release") {
						ch.OnExpiry = sluice.ExpiryRelease
					}
				case sluice.KindConcurrency:
					ch.Limit = rapid.Int64Range(1, 3).Draw(t, "limit")
					ch.Amount = 1
				}
				out = append(out, ch)
			}
			return out
		}
		twin := func(chs []sluice.Charge, deadline time.Time) (*sluice.Batch, *sluice.Batch) {
			nextID++
			return &sluice.Batch{ID: nextID, Deadline: deadline, Charges: slices.Clone(chs)},
				&sluice.Batch{ID: nextID, Deadline: deadline, Charges: slices.Clone(chs)}
		}
		same := func(op string, b *sluice.Batch, mr, pr []sluice.ChargeResult) {
			for i := range b.Charges {
				ch, mc, pc := &b.Charges[i], &mr[i], &pr[i]
				if mc.Allowed != pc.Allowed || mc.Remaining != pc.Remaining || mc.Used != pc.Used ||
					mc.RetryAfter != pc.RetryAfter || !mc.ResetAt.Equal(pc.ResetAt) {
					t.Fatalf("%s, charge %d (%s limit %d burst %d amount %d shadow %v):\n memstore allowed %v remaining %d used %d retry %v reset %v\n pgstore  allowed %v remaining %d used %d retry %v reset %v",
						op, i, ch.Kind, ch.Limit, ch.Burst, ch.Amount, ch.Shadow,
						mc.Allowed, mc.Remaining, mc.Used, mc.RetryAfter, mc.ResetAt.UnixNano(),
						pc.Allowed, pc.Remaining, pc.Used, pc.RetryAfter, pc.ResetAt.UnixNano())
				}
			}
		}

		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		for step := range steps {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0: // time passes, by up to a window's worth
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(90*time.Second)).Draw(t, "advance")))
			case 1, 2: // admit
				m, p := twin(charges("admit"), now.Add(time.Duration(rapid.Int64Range(1, int64(2*time.Minute)).Draw(t, "timeout"))))
				mr, pr := make([]sluice.ChargeResult, len(m.Charges)), make([]sluice.ChargeResult, len(p.Charges))
				mok, _ := mem.Admit(ctx, now, *m, mr)
				t0 := time.Now()
				pok, err := pg.Admit(ctx, now, *p, pr)
				if err != nil {
					logActivity(t, admin)
					t.Fatalf("step %d: pgstore admit: %v (after %v)", step, err, time.Since(t0))
				}
				if mok != pok {
					t.Fatalf("step %d: memstore admitted %v, pgstore %v", step, mok, pok)
				}
				same(fmt.Sprintf("step %d admit", step), m, mr, pr)
				if mok {
					opened = append(opened, open{m, p})
				}
			case 3: // settle an open batch with random actuals
				if len(opened) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(opened)-1).Draw(t, "settle")
				o := opened[i]
				opened = slices.Delete(opened, i, i+1)
				for j := range o.mem.Charges {
					actual := o.mem.Charges[j].Amount
					if o.mem.Charges[j].Kind != sluice.KindConcurrency {
						actual = rapid.Int64Range(0, 2*actual+3).Draw(t, "actual")
					}
					o.mem.Charges[j].Actual, o.pg.Charges[j].Actual = actual, actual
				}
				_ = mem.Settle(ctx, now, *o.mem)
				if err := pg.Settle(ctx, now, *o.pg); err != nil {
					logActivity(t, admin)
					t.Fatalf("step %d: pgstore settle: %v", step, err)
				}
			case 4: // peek
				m, p := twin(charges("peek"), time.Time{})
				mr, pr := make([]sluice.ChargeResult, len(m.Charges)), make([]sluice.ChargeResult, len(p.Charges))
				_ = mem.Peek(ctx, now, *m, mr)
				if err := pg.Peek(ctx, now, *p, pr); err != nil {
					t.Fatalf("step %d: pgstore peek: %v", step, err)
				}
				same(fmt.Sprintf("step %d peek", step), m, mr, pr)
			case 5: // sweep
				mres, _ := mem.Sweep(ctx, now)
				pres, err := pg.Sweep(ctx, now)
				if err != nil {
					t.Fatalf("step %d: pgstore sweep: %v", step, err)
				}
				// The pgstore schema is shared by every run: count only
				// this run's reservations, which is all of them, as each
				// run sweeps what it opened before the next starts.
				if mres != pres {
					t.Fatalf("step %d: memstore swept %+v, pgstore %+v", step, mres, pres)
				}
			}
		}
		// Leave nothing open for the next run's sweeps.
		far := now.Add(24 * time.Hour)
		mres, _ := mem.Sweep(ctx, far)
		pres, err := pg.Sweep(ctx, far)
		if err != nil || mres != pres {
			t.Fatalf("final sweep: memstore %+v, pgstore %+v %v", mres, pres, err)
		}
	})
}

// logActivity logs what the database's sessions are doing, to tell a lock
// wait from a slow machine when a call times out.
func logActivity(t *rapid.T, admin *pgxpool.Pool) {
	rows, err := admin.Query(context.Background(), `SELECT pid, coalesce(state, ''), coalesce(wait_event_type, ''),
	coalesce(wait_event, ''), coalesce((now() - query_start)::text, ''), left(query, 100)
FROM pg_stat_activity WHERE state <> 'idle' AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Logf("pg_stat_activity: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var state, waitType, wait, age, query string
		if err := rows.Scan(&pid, &state, &waitType, &wait, &age, &query); err == nil {
			t.Logf("session %d %s wait %s/%s for %s: %s", pid, state, waitType, wait, age, query)
		}
	}
}
