package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
)

// reservedReader is admin.ReservedReader: a store that says what open
// reservations hold on budget counters, as every process sharing it sees
// them.
type reservedReader interface {
	Reserved(ctx context.Context, keys []sluice.CounterKey) ([]int64, error)
}

// reservedScenarios apply to stores that are a reservedReader; the others
// pass them trivially.
var reservedScenarios = map[string]func(t *testing.T, h *Harness){
	// Two limiters on one store stand for two replicas: each sees what the
	// other's open reservations hold.
	"ReservedSeenAcrossReplicas": func(t *testing.T, h *Harness) {
		rr, ok := h.Store.(reservedReader)
		if !ok {
			t.Logf("%T is not an admin.ReservedReader", h.Store)
			return
		}
		rule := dailyTokens(1000)
		a, b := h.Limiter(rule), h.Limiter(rule)
		first := h.Admit(a, Tokens("k", 10, 20))
		second := h.Admit(b, Tokens("k", 40, 60))
		key := first.Charges()[0].Key
		other := key
		other.Subject += "-nobody"
		read := func(want ...int64) {
			t.Helper()
			got, err := rr.Reserved(h.Ctx, []sluice.CounterKey{key, other})
			if err != nil {
				t.Fatalf("reserved: %v", err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("reserved = %v, want %v", got, want)
			}
		}
		read(130, 0)
		h.Settle(first, sluice.Usage{InputTokens: 10, OutputTokens: 5})
		read(100, 0)
		if err := second.Release(h.Ctx); err != nil {
			t.Fatal(err)
		}
		read(0, 0)
		if got, err := rr.Reserved(h.Ctx, nil); err != nil || len(got) != 0 {
			t.Fatalf("reserved of no keys = %v, %v", got, err)
		}
	},
}
