package sluice

import (
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/cacheline"
)

// TestHotData_OwnsItsLines checks that what every admission reads (the
// compiled policy and its arrays, the real clock and its anchor) starts on a
// cache line and fills whole lines.
func TestHotData_OwnsItsLines(t *testing.T) {
	limit := int64(5)
	cp, err := compilePolicy(Policy{
		Rules: []Rule{
			{Name: "rpm", Kind: KindRate, Subject: "key", Limit: 10, Window: time.Minute},
			{Name: "tpm", Kind: KindRate, Subject: "workspace+user", Metric: MetricTokens, Limit: 1000, Window: time.Minute},
			{Name: "conc", Kind: KindConcurrency, Subject: "key", Limit: 2},
		},
		Overrides: []Override{{Rule: "rpm", Attribute: "key", Value: "k", Limit: &limit}},
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := newRealClock()
	owned := map[string]bool{
		"policy":        cacheline.Owns(unsafe.Pointer(cp), unsafe.Sizeof(policyLines{})),
		"rules":         cacheline.OwnsArray(cp.rules),
		"candidates":    cacheline.OwnsArray(cp.candidates),
		"overrideAttrs": cacheline.OwnsArray(cp.overrideAttrs),
		"realClock":     cacheline.Owns(unsafe.Pointer(clock), unsafe.Sizeof(*clock)),
		"anchor":        cacheline.Owns(unsafe.Pointer(clock.anchor.Load()), unsafe.Sizeof(anchor{})),
	}
	for _, r := range cp.rules {
		owned[r.Name+".attrs"] = cacheline.OwnsArray(r.attrs)
	}
	for name, ok := range owned {
		if !ok {
			t.Errorf("%s: not whole cache lines of its own", name)
		}
	}
}
