package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestConformance runs the suite with the Limiter reading its charges in
// place (AdmitLocal, SettleLocal).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
}

// batchOnly hides a Store's in-process methods, so that the Limiter goes
// through sluice.Store and Batches, as over any other store.
type batchOnly struct{ sluice.Store }

// TestConformance_Batches runs the suite through sluice.Store: the same
// counters, reached from Batches.
func TestConformance_Batches(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return batchOnly{memstore.New(memstore.Options{})} })
}
