package pgstore_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
)

// TestPhantom_AdmissionAnsweredLateIsReleased sends an admission (a budget
// charge and a concurrency lease) to a store whose timeout is 400 ms while
// the database's answers are delayed 1 s (toxiproxy between them): the
// caller gets a timeout, the admission commits at the server all the same,
// and once the answers come in time again the store releases it: nothing
// reserved, no lease, nothing charged. Before the release existed the
// reservation stayed until the sweep charged it, and the lease until it
// expired.
func TestPhantom_AdmissionAnsweredLateIsReleased(t *testing.T) {
	t.Parallel()
	testPhantomReleased(t, "downstream")
}

// TestPhantom_AdmissionArrivingLateIsReleased is the same with the requests
// delayed instead: the admission reaches the server after its caller gave
// up, and perhaps after the first release, which is why the release is
// sent again.
func TestPhantom_AdmissionArrivingLateIsReleased(t *testing.T) {
	t.Parallel()
	testPhantomReleased(t, "upstream")
}

func testPhantomReleased(t *testing.T, stream string) {
	u, err := url.Parse(postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	toxi := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(toxi, "pg", "127.0.0.1:0", u.Host)
	if err := toxi.Collection.Add(p, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = toxi.Collection.Clear() })
	u.Host = p.Listen
	schema := testSchema(t)
	// One connection, which has run an admission: the next one is sent
	// whole at once (its statement is prepared on that connection). The
	// schema is migrated directly first; opening through the proxy is
	// retried, as a loaded machine may miss the short connect timeout.
	openStore(t, schema, pgstore.Options{})
	const timeout = 400 * time.Millisecond
	var s *pgstore.Store
	for attempt := 0; s == nil; attempt++ {
		var err error
		s, err = pgstore.Open(context.Background(), pgstore.Options{URL: u.String(), Schema: schema, Timeout: timeout, MaxConns: 1, NoMigrate: true})
		if err != nil && attempt == 4 {
			t.Fatalf("open through the proxy: %v", err)
		}
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	const rule = 41
	warm := batch(budgetCharge(rule, "warm", 1000, 1))
	if ok, err := admitBatch(ctx, s, time.Now(), warm); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(
		`{"name":"late","type":"latency","stream":"` + stream + `","attributes":{"latency":1000}}`)); err != nil {
		t.Fatal(err)
	}
	// The database is watched directly, from the moment the caller gives
	// up: the release may be applied as soon as the answers come in time
	// again (the toxic's held bytes are let through at once when it is
	// removed), so a watch that began then could miss the hold.
	pool := schemaPool(t, schema)
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	lease := sluice.Charge{Key: sluice.CounterKey{Rule: rule + 1, Subject: "w"}, Kind: sluice.KindConcurrency, Limit: 1, Amount: 1, Actual: 1}
	b := batch(budgetCharge(rule, "w", 1000, 100), lease)
	if _, err = admitBatch(ctx, s, time.Now(), b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("admit with the answers late: %v, want a timeout", err)
	}
	removed := make(chan error, 1)
	time.AfterFunc(time.Second, func() { removed <- p.Toxics.RemoveToxic(ctx, "late") })
	sawHeld := false
	deadline := time.Now().Add(10 * time.Second)
	for {
		var reserved, used, leases int64
		if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT reserved FROM sluice_counters WHERE rule = $1 AND subject = 'w'), 0),
			coalesce((SELECT used FROM sluice_counters WHERE rule = $1 AND subject = 'w'), 0),
			(SELECT count(*) FROM sluice_leases WHERE rule = $2)`, int64(rule), int64(rule+1)).Scan(&reserved, &used, &leases); err != nil {
			t.Fatal(err)
		}
		sawHeld = sawHeld || reserved > 0 || leases > 0
		select {
		case err := <-removed:
			if err != nil {
				t.Fatal(err)
			}
		default:
		}
		if sawHeld && reserved == 0 && leases == 0 {
			if used != 0 {
				t.Fatalf("released, but %d charged", used)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the admission: reserved %d, used %d, %d leases (held at some point: %v); want it applied, then released",
				reserved, used, leases, sawHeld)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGroup_QueuedCallGivesUpWithinTheTimeout holds the counter row of x
// locked while an admission on x runs (and waits for the lock), and sends a
// second admission on x behind it: queued for the next call, which waits
// for the lock too, it fails within the store's timeout of its own start,
// not after the running call's timeout and then its own.
func TestGroup_QueuedCallGivesUpWithinTheTimeout(t *testing.T) {
	schema := testSchema(t)
	const timeout = 400 * time.Millisecond
	s := openStore(t, schema, pgstore.Options{Timeout: timeout})
	var calls atomic.Int64
	pgstore.SetExecHook(s, func(int) { calls.Add(1) })
	ctx := context.Background()
	const rule = 43
	if ok, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "x", 1000, 1))); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	tx, err := schemaPool(t, schema).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM sluice_counters WHERE rule = $1 AND subject = 'x' FOR UPDATE", int64(rule)); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() {
		_, err := admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "x", 1000, 1)))
		stuck <- err
	}()
	for calls.Load() < 2 { // the first call on x is running, waiting for the lock
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	_, err = admitBatch(ctx, s, time.Now(), batch(budgetCharge(rule, "x", 1000, 1)))
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the queued admission on x admitted after %v while its row was locked", took)
	}
	if took > timeout+200*time.Millisecond {
		t.Fatalf("the queued admission failed after %v (%v), want within the timeout %v", took, err, timeout)
	}
	t.Logf("the queued admission failed after %v: %v", took, err)
	if err := <-stuck; err == nil {
		t.Fatal("the first admission on x admitted while its row was locked")
	}
}
