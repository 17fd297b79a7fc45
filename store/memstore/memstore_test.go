package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/counter"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
}

// The arithmetic memstore uses saturates where the Store contract says.
func TestCounterCeiling_IsTheContracts(t *testing.T) {
	if counter.Ceiling != sluice.CounterCeiling {
		t.Fatalf("counter.Ceiling %d, sluice.CounterCeiling %d", int64(counter.Ceiling), int64(sluice.CounterCeiling))
	}
}
