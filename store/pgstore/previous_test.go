package pgstore_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/store/pgstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestPreviousVersion_KeepsCounters loads the rows the version before
// counters were qualified by their org wrote (testdata/previous.sql, dumped
// from the schema "sluiceprev") into a fresh schema: its default-org
// budgets and buckets go on where they were.
func TestPreviousVersion_KeepsCounters(t *testing.T) {
	b, err := os.ReadFile("testdata/previous.sql")
	if err != nil {
		t.Fatal(err)
	}
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{PinTime: true})
	rows := strings.ReplaceAll(string(b), "INSERT INTO sluiceprev.", "INSERT INTO "+pgx.Identifier{schema}.Sanitize()+".")
	if _, err := adminPool(t).Exec(context.Background(), rows); err != nil {
		t.Fatalf("load the previous version's rows: %v", err)
	}
	h := &storetest.Harness{T: t, Store: s, Clock: storetest.NewClock(storetest.PreviousVersionAt), Ctx: context.Background()}
	storetest.CheckPreviousVersion(t, h, true)
}
