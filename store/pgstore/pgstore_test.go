package pgstore_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/pgstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestConformance runs the whole suite, each scenario in its own schema,
// with the store's time pinned to the suite's manual clock.
func TestConformance(t *testing.T) {
	postgresURL(t)
	storetest.Run(t, func(t *testing.T) sluice.Store {
		return openStore(t, testSchema(t), pgstore.Options{PinTime: true})
	})
}
