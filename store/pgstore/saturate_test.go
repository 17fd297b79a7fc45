package pgstore_test

import (
	"context"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// Counters holding what no saturating store writes (a usage wrapped
// negative or at 2^63-1, a negative reservation) are repaired when the
// store opens: usage to the ceiling, spent until the period ends,
// reservations into bounds, with one warning per counter; good counters
// are left alone, and the next Open finds nothing to repair.
func TestOpen_RepairsBadCounters(t *testing.T) {
	schema := testSchema(t)
	var logged syncbuf.Buffer
	opts := pgstore.Options{PinTime: true, Logger: slog.New(slog.NewTextHandler(&logged, nil))}
	s := openStore(t, schema, opts)
	h := &storetest.Harness{T: t, Store: s, Clock: storetest.NewClock(storetest.Start), Ctx: context.Background()}
	l := h.Limiter(sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
		Limit: 1_000_000, Period: sluice.PeriodDay})
	req := func(ws string) sluice.Request {
		return sluice.Request{Identity: sluice.Identity{Workspace: ws}, Max: sluice.Usage{InputTokens: 100}}
	}
	for _, ws := range []string{"negative", "max", "reserved", "good"} {
		h.Settle(h.Admit(l, req(ws)), sluice.Usage{InputTokens: 40})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{schema, "sluice_counters"}.Sanitize()
	ctx := context.Background()
	for _, q := range []string{
		`UPDATE ` + table + ` SET used = -9223372036854412069 WHERE subject = 'negative'`,
		`UPDATE ` + table + ` SET used = 9223372036854775807 WHERE subject = 'max'`,
		`UPDATE ` + table + ` SET reserved = -5 WHERE subject = 'reserved'`,
	} {
		if _, err := adminPool(t).Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	h.Store = openStore(t, schema, opts)
	l = h.Limiter(l.Policy().Rules...)
	for ws, want := range map[string]int64{"negative": sluice.CounterCeiling, "max": sluice.CounterCeiling, "reserved": 40, "good": 40} {
		if used, _ := h.Used(l, sluice.Identity{Workspace: ws}, "daily"); used != want {
			t.Errorf("%s: used %d after repair, want %d", ws, used, want)
		}
	}
	h.Refuse(l, req("max"), sluice.ErrBudgetExhausted)
	h.Settle(h.Admit(l, req("reserved")), sluice.Usage{InputTokens: 10})
	out := logged.String()
	if n := strings.Count(out, "budget counter out of bounds"); n != 3 {
		t.Fatalf("%d warnings, want one per bad counter:\n%s", n, out)
	}
	for _, want := range []string{"subject=negative", "subject=max", "subject=reserved", "used=-9223372036854412069", "reserved=-5"} {
		if !strings.Contains(out, want) {
			t.Errorf("warnings do not say %s:\n%s", want, out)
		}
	}
	openStore(t, schema, opts).Close()
	if n := strings.Count(logged.String(), "budget counter out of bounds"); n != 3 {
		t.Fatalf("a second Open warned again:\n%s", logged.String())
	}
}

// Shadow charges are never refused, so only the ceiling bounds their
// usage: sums past 2^63 saturate at 2^53 through the group function, the
// sweep, and 0001's sluice_settle, where a bigint would have failed the
// statement.
func TestBudget_SaturatesAtCeiling(t *testing.T) {
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{PinTime: true})
	h := &storetest.Harness{T: t, Store: s, Clock: storetest.NewClock(storetest.Start), Ctx: context.Background()}
	start, end := sluice.PeriodBounds(sluice.PeriodDay, h.Clock.Now(), time.UTC)
	key := sluice.CounterKey{Rule: 9, Subject: "w", Period: start.Unix()}
	batch := func(id uint64) *sluice.Batch {
		return &sluice.Batch{ID: id, Deadline: h.Clock.Now().Add(time.Minute), Charges: []sluice.Charge{{
			Key: key, Kind: sluice.KindBudget, Limit: math.MaxInt64, PeriodEnd: end, Amount: math.MaxInt64, Shadow: true,
		}}}
	}
	for i := range 3 {
		b := batch(uint64(i + 1))
		if ok, err := admitBatch(h.Ctx, h.Store, h.Clock.Now(), b); !ok || err != nil {
			t.Fatalf("admit %d: %v %v", i, ok, err)
		}
		b.Charges[0].Actual = math.MaxInt64
		if err := h.Store.Settle(h.Ctx, h.Clock.Now(), *b); err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
	}
	for i := range 3 { // left to the sweep
		if ok, err := admitBatch(h.Ctx, h.Store, h.Clock.Now(), batch(uint64(100+i))); !ok || err != nil {
			t.Fatalf("admit %d: %v %v", i, ok, err)
		}
	}
	read := func() (used, reserved int64) {
		t.Helper()
		q := `SELECT used, reserved FROM ` + pgx.Identifier{schema, "sluice_counters"}.Sanitize() + ` WHERE subject = 'w'`
		if err := adminPool(t).QueryRow(h.Ctx, q).Scan(&used, &reserved); err != nil {
			t.Fatal(err)
		}
		return used, reserved
	}
	if used, reserved := read(); used != sluice.CounterCeiling || reserved != sluice.CounterCeiling {
		t.Fatalf("used %d reserved %d, want both the ceiling", used, reserved)
	}
	h.Clock.Advance(2 * time.Minute)
	if res, err := h.Store.Sweep(h.Ctx, h.Clock.Now()); err != nil || res.Charged != 3 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if used, reserved := read(); used != sluice.CounterCeiling || reserved != 0 {
		t.Fatalf("after the sweep: used %d reserved %d, want the ceiling and 0", used, reserved)
	}
	// 0001's sluice_settle, as a replica of the version before 0002 calls it.
	ins := `INSERT INTO ` + pgx.Identifier{schema, "sluice_reservations"}.Sanitize() +
		` (batch_id, deadline, kind, rule, subject, period, amount, period_end, release) VALUES (7, 0, '{2}', '{9}', '{w}', $1, '{1}', $2, '{f}')`
	if _, err := adminPool(t).Exec(h.Ctx, ins, []int64{key.Period}, []int64{end.UnixNano()}); err != nil {
		t.Fatal(err)
	}
	call := `SELECT sluice_settle($4, 7, '{2}', '{9}', '{w}', $1, '{1}', '{0}', '{0}', $2, '{1}', $3)`
	var applied bool
	if err := schemaPool(t, schema).QueryRow(h.Ctx, call, []int64{key.Period}, []int64{end.UnixNano()}, []int64{math.MaxInt64}, h.Clock.Now().UnixNano()).Scan(&applied); err != nil || !applied {
		t.Fatalf("sluice_settle: %v %v", applied, err)
	}
	if used, _ := read(); used != sluice.CounterCeiling {
		t.Fatalf("after sluice_settle: used %d, want the ceiling", used)
	}
}
