package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/store/sqlitestore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestPreviousVersion_KeepsBudgets opens a store file written by the
// version before counters were qualified by their org
// (testdata/previous.sqlite): its default-org budgets go on where they were.
func TestPreviousVersion_KeepsBudgets(t *testing.T) {
	b, err := os.ReadFile("testdata/previous.sqlite")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "store.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock(storetest.PreviousVersionAt)
	s, err := sqlitestore.Open(sqlitestore.Options{Path: path, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckPreviousVersion(t, &storetest.Harness{T: t, Store: s, Clock: clock, Ctx: context.Background()}, false)
}
