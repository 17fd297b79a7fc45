package redisstore_test

import (
	"context"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
)

// budgetKeys returns the budget hashes under prefix, by the workspace
// their key names.
func budgetKeys(t *testing.T, raw rueidis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := raw.Do(ctx, raw.B().Keys().Pattern(prefix+":*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if typ, _ := raw.Do(ctx, raw.B().Type().Key(k).Build()).ToString(); typ == "hash" {
			for _, ws := range []string{"float", "negative", "garbage", "good", "w"} {
				if strings.Contains(k, "{"+ws+"}") {
					out[ws] = k
				}
			}
		}
	}
	return out
}

// Budget hashes holding what an older version could store (a float-rounded
// sum past 2^63, a wrapped negative, garbage) are repaired by the first
// script that reads them: spent, at the ceiling, until the period ends,
// with one warning naming each key; a good hash is left alone.
func TestBudget_RepairsBadCounters(t *testing.T) {
	url := redisURL(t)
	var logged syncbuf.Buffer
	prefix := freshPrefix()
	h := harness(t, redisstore.Options{URL: url, PinTime: true, Prefix: prefix, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	l := h.Limiter(sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
		Limit: 1_000_000, Period: sluice.PeriodDay})
	req := func(ws string) sluice.Request {
		return sluice.Request{Identity: sluice.Identity{Workspace: ws}, Max: sluice.Usage{InputTokens: 100}}
	}
	for _, ws := range []string{"float", "negative", "garbage", "good"} {
		h.Settle(h.Admit(l, req(ws)), sluice.Usage{InputTokens: 40})
	}
	raw, err := redisstore.RawClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	keys := budgetKeys(t, raw, prefix)
	ctx := context.Background()
	for ws, u := range map[string]string{"float": "9.2233720368547758e+18", "negative": "-9223372036854412069", "garbage": "x"} {
		if err := raw.Do(ctx, raw.B().Hset().Key(keys[ws]).FieldValue().FieldValue("u", u).Build()).Error(); err != nil {
			t.Fatalf("set %s: %v", ws, err)
		}
	}
	for range 2 { // the second reading finds them repaired
		for _, ws := range []string{"float", "negative", "garbage"} {
			if used, _ := h.Used(l, sluice.Identity{Workspace: ws}, "daily"); used != sluice.CounterCeiling {
				t.Errorf("%s: used %d, want the ceiling", ws, used)
			}
			if u, _ := raw.Do(ctx, raw.B().Hget().Key(keys[ws]).Field("u").Build()).ToString(); u != "9007199254740992" {
				t.Errorf("%s: stored u %q, want 9007199254740992", ws, u)
			}
		}
	}
	h.Refuse(l, req("float"), sluice.ErrBudgetExhausted)
	if used, _ := h.Used(l, sluice.Identity{Workspace: "good"}, "daily"); used != 40 {
		t.Errorf("good: used %d, want 40", used)
	}
	out := logged.String()
	if n := strings.Count(out, "budget counter out of bounds"); n != 3 {
		t.Fatalf("%d warnings, want one per bad key:\n%s", n, out)
	}
	for _, ws := range []string{"float", "negative", "garbage"} {
		if !strings.Contains(out, keys[ws]) {
			t.Errorf("no warning names %s:\n%s", keys[ws], out)
		}
	}
}

// Shadow charges are never refused, so their usage has no bound but the
// ceiling: sums past 2^53 are stored as exactly 2^53, never float-rounded,
// through settlements and the sweep alike.
func TestBudget_SaturatesAtCeiling(t *testing.T) {
	url := redisURL(t)
	prefix := freshPrefix()
	h := harness(t, redisstore.Options{URL: url, PinTime: true, Prefix: prefix})
	start, end := sluice.PeriodBounds(sluice.PeriodDay, h.Clock.Now(), time.UTC)
	batch := func(id uint64) *sluice.Batch {
		return &sluice.Batch{ID: id, Deadline: h.Clock.Now().Add(time.Minute), Charges: []sluice.Charge{{
			Key:  sluice.CounterKey{Rule: 9, Subject: "w", Period: start.Unix()},
			Kind: sluice.KindBudget, Limit: 1, PeriodEnd: end, Amount: 1 << 51, Shadow: true,
		}}}
	}
	for i := range 6 {
		b := batch(uint64(i + 1))
		if ok, err := admitBatch(h.Ctx, h.Store, h.Clock.Now(), b); !ok || err != nil {
			t.Fatalf("admit %d: %v %v", i, ok, err)
		}
		b.Charges[0].Actual = 1 << 62 // clamped by the store to its own bound
		if err := h.Store.Settle(h.Ctx, h.Clock.Now(), *b); err != nil {
			t.Fatal(err)
		}
	}
	// Six more left to the sweep, charged their 2^51 each.
	for i := range 6 {
		if ok, err := admitBatch(h.Ctx, h.Store, h.Clock.Now(), batch(uint64(100+i))); !ok || err != nil {
			t.Fatalf("admit %d: %v %v", i, ok, err)
		}
	}
	raw, err := redisstore.RawClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	key := budgetKeys(t, raw, prefix)["w"]
	ctx := context.Background()
	read := func() (u, r string) {
		v, err := raw.Do(ctx, raw.B().Hmget().Key(key).Field("u", "r").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		return v[0], v[1]
	}
	if u, r := read(); u != "9007199254740992" || r != "9007199254740992" {
		t.Fatalf("after settling 6 x 2^51 and reserving 6 more: u %s r %s, want both the ceiling 9007199254740992", u, r)
	}
	h.Clock.Advance(2 * time.Minute)
	if res, err := h.Store.Sweep(h.Ctx, h.Clock.Now()); err != nil || res.Charged != 6 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if u, r := read(); u != "9007199254740992" || r != "0" {
		t.Fatalf("after the sweep: u %s r %s, want the ceiling and nothing reserved", u, r)
	}
	var peek = batch(999)
	peek.Charges[0].Amount, peek.Charges[0].Shadow = 0, false
	res := make([]sluice.ChargeResult, 1)
	if err := h.Store.Peek(h.Ctx, h.Clock.Now(), *peek, res); err != nil || res[0].Used != sluice.CounterCeiling {
		t.Fatalf("peek: used %d, %v", res[0].Used, err)
	}
}
