package pgstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
)

// recordTable is a Recorder that inserts each record, a string, into the
// table settle_records of the store's schema. The table refuses the record
// "refused", as a ledger refuses a row it cannot hold.
type recordTable struct{}

func (recordTable) QueueRecords(recs []any, queue func(string, ...any)) error {
	for _, r := range recs {
		queue("INSERT INTO settle_records (v) VALUES ($1)", r)
	}
	return nil
}

// openRecording opens a store in a fresh schema, with recordTable as its
// Recorder and the table made.
func openRecording(t *testing.T) (*pgstore.Store, string) {
	t.Helper()
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{Recorder: recordTable{}})
	if _, err := schemaPool(t, schema).Exec(context.Background(),
		`CREATE TABLE settle_records (v text NOT NULL CHECK (v <> 'refused'))`); err != nil {
		t.Fatal(err)
	}
	return s, schema
}

// recordsIn returns the records written in schema, sorted.
func recordsIn(t *testing.T, schema string) []string {
	t.Helper()
	rows, err := schemaPool(t, schema).Query(context.Background(), "SELECT v FROM settle_records ORDER BY v")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// settled returns b with each charge's Actual set to actual.
func settled(b *sluice.Batch, actual int64) *sluice.Batch {
	for i := range b.Charges {
		b.Charges[i].Actual = actual
	}
	return b
}

// TestSettle_RecordCommitsWithTheSettlement: a settlement's record is
// written in its commit, and taken.
func TestSettle_RecordCommitsWithTheSettlement(t *testing.T) {
	s, schema := openRecording(t)
	const rule = 21
	b := batch(budgetCharge(rule, "w", 1000, 100))
	if ok, err := admitBatch(context.Background(), s, time.Now(), b); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	ctx, taken := pgstore.WithRecord(context.Background(), "a")
	if err := s.Settle(ctx, time.Now(), *settled(b, 40)); err != nil {
		t.Fatal(err)
	}
	if !taken() {
		t.Error("the settlement did not take its record")
	}
	if got := recordsIn(t, schema); !slices.Equal(got, []string{"a"}) {
		t.Errorf("records %q, want [a]", got)
	}
	if reserved, used := reservedOf(t, schema, rule, "w"); reserved != 0 || used != 40 {
		t.Errorf("budget reserved %d used %d, want 0 and 40", reserved, used)
	}
}

// TestSettle_FailedTransactionLeavesNoRecord: a record the database refuses
// fails its settlement, which rolls back with it: no record, the
// reservation still held, nothing taken. Retried with a record that fits,
// the settlement applies once with that one record. An admission that
// shared the failed group call is admitted all the same.
func TestSettle_FailedTransactionLeavesNoRecord(t *testing.T) {
	s, schema := openRecording(t)
	const rule = 22
	ctx := context.Background()
	b := batch(budgetCharge(rule, "w", 1000, 100))
	if ok, err := admitBatch(ctx, s, time.Now(), b); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}

	sizes := groupOf(t, s, 2)
	lead := batch(budgetCharge(rule, "lead", 1000, 1))
	other := batch(budgetCharge(rule, "other", 1000, 7))
	refusedCtx, refusedTaken := pgstore.WithRecord(ctx, "refused")
	var settleErr error
	var admitted bool
	var wg sync.WaitGroup
	wg.Go(func() {
		if ok, err := admitBatch(ctx, s, time.Now(), lead); err != nil || !ok {
			t.Errorf("admit lead: %v %v", ok, err)
		}
	})
	for pgstore.Queued(s) == 0 && len(sizes()) == 0 {
		time.Sleep(time.Millisecond)
	}
	wg.Go(func() { settleErr = s.Settle(refusedCtx, time.Now(), *settled(b, 40)) })
	wg.Go(func() {
		ok, err := admitBatch(ctx, s, time.Now(), other)
		if err != nil {
			t.Errorf("admit beside the failed settlement: %v", err)
		}
		admitted = ok
	})
	wg.Wait()
	t.Logf("group calls of %v operations", sizes())
	if !slices.Contains(sizes(), 2) {
		t.Errorf("calls of %v operations: the settlement and the admission never shared one", sizes())
	}
	if settleErr == nil {
		t.Fatal("a settlement whose record was refused succeeded")
	}
	if refusedTaken() {
		t.Error("a failed settlement took its record")
	}
	if got := recordsIn(t, schema); len(got) != 0 {
		t.Errorf("records %q after the failed settlement, want none", got)
	}
	if reserved, used := reservedOf(t, schema, rule, "w"); reserved != 100 || used != 0 {
		t.Errorf("after the failed settlement the budget has reserved %d used %d, want 100 and 0", reserved, used)
	}
	if reserved, _ := reservedOf(t, schema, rule, "other"); !admitted || reserved != 7 {
		t.Errorf("the admission beside it: admitted %v, reserved %d, want true and 7", admitted, reserved)
	}

	retryCtx, retryTaken := pgstore.WithRecord(ctx, "b")
	if err := s.Settle(retryCtx, time.Now(), *b); err != nil {
		t.Fatal(err)
	}
	if !retryTaken() {
		t.Error("the retry did not take its record")
	}
	if got := recordsIn(t, schema); !slices.Equal(got, []string{"b"}) {
		t.Errorf("records %q after the retry, want [b]", got)
	}
	if reserved, used := reservedOf(t, schema, rule, "w"); reserved != 0 || used != 40 {
		t.Errorf("after the retry the budget has reserved %d used %d, want 0 and 40", reserved, used)
	}
}

// TestSettle_RecordOfABatchSettledAlreadyIsDropped: settling again (a retry
// after a failure whose commit went through) or after the sweep applies
// nothing and writes no second record, but takes it, so that the caller
// does not record it elsewhere.
func TestSettle_RecordOfABatchSettledAlreadyIsDropped(t *testing.T) {
	s, schema := openRecording(t)
	ctx := context.Background()
	const rule = 23
	b := batch(budgetCharge(rule, "w", 1000, 100))
	if ok, err := admitBatch(ctx, s, time.Now(), b); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	first, _ := pgstore.WithRecord(ctx, "first")
	if err := s.Settle(first, time.Now(), *settled(b, 40)); err != nil {
		t.Fatal(err)
	}
	again, againTaken := pgstore.WithRecord(ctx, "again")
	if err := s.Settle(again, time.Now(), *b); err != nil {
		t.Fatal(err)
	}

	swept := batch(budgetCharge(rule, "w", 1000, 50))
	swept.Deadline = time.Now().Add(time.Millisecond)
	if ok, err := admitBatch(ctx, s, time.Now(), swept); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	time.Sleep(10 * time.Millisecond) // the database's clock passes the deadline
	if res, err := s.Sweep(ctx, time.Now()); err != nil || res.Charged != 1 {
		t.Fatalf("sweep %+v, %v", res, err)
	}
	late, lateTaken := pgstore.WithRecord(ctx, "late")
	if err := s.Settle(late, time.Now(), *settled(swept, 10)); err != nil {
		t.Fatal(err)
	}

	if !againTaken() || !lateTaken() {
		t.Errorf("records taken: again %v, after the sweep %v; want both", againTaken(), lateTaken())
	}
	if got := recordsIn(t, schema); !slices.Equal(got, []string{"first"}) {
		t.Errorf("records %q, want [first]", got)
	}
	if reserved, used := reservedOf(t, schema, rule, "w"); reserved != 0 || used != 90 {
		t.Errorf("budget reserved %d used %d, want 0 and 90 (40 settled, 50 swept)", reserved, used)
	}
}

// TestSettle_RecordWithNothingToSettle: a settlement that changes no
// counter (a rate charge settled at its amount) still writes its record.
func TestSettle_RecordWithNothingToSettle(t *testing.T) {
	s, schema := openRecording(t)
	ctx := context.Background()
	b := batch(rateCharge(24, "k", 100, 1))
	if ok, err := admitBatch(ctx, s, time.Now(), b); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	rctx, taken := pgstore.WithRecord(ctx, "r")
	if err := s.Settle(rctx, time.Now(), *b); err != nil {
		t.Fatal(err)
	}
	if got := recordsIn(t, schema); !taken() || !slices.Equal(got, []string{"r"}) {
		t.Errorf("taken %v, records %q; want true and [r]", taken(), got)
	}
}

// TestSettle_RecordWithoutRecorderIsNotTaken: a store without a Recorder
// leaves the record to its caller.
func TestSettle_RecordWithoutRecorderIsNotTaken(t *testing.T) {
	s := openStore(t, testSchema(t), pgstore.Options{})
	ctx := context.Background()
	b := batch(budgetCharge(25, "w", 1000, 100))
	if ok, err := admitBatch(ctx, s, time.Now(), b); err != nil || !ok {
		t.Fatalf("admit: %v %v", ok, err)
	}
	rctx, taken := pgstore.WithRecord(ctx, "r")
	if err := s.Settle(rctx, time.Now(), *settled(b, 40)); err != nil {
		t.Fatal(err)
	}
	if taken() {
		t.Error("a store without a Recorder took the record")
	}
}
