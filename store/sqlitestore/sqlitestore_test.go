package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/sqlitestore"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(t.TempDir(), "store.db")})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformance_HoldSettlements(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s, err := sqlitestore.Open(sqlitestore.Options{Path: filepath.Join(t.TempDir(), "store.db"), HoldSettlements: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
