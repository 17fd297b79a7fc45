package sluice

import (
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/cacheline"
)

// TestHotStructuresFillWholeLines checks the sizes that keep what every
// admission reads off other objects' cache lines.
func TestHotStructuresFillWholeLines(t *testing.T) {
	for name, size := range map[string]uintptr{
		"policyLines": unsafe.Sizeof(policyLines{}),
		"realClock":   unsafe.Sizeof(realClock{}),
		"anchor":      unsafe.Sizeof(anchor{}),
	} {
		if size%cacheline.Size != 0 {
			t.Errorf("%s: %d bytes, not a multiple of %d", name, size, cacheline.Size)
		}
	}
}

// TestCompilePolicy_ArraysOwnTheirLines checks that the arrays an admission
// reads start on a cache line and fill whole lines.
func TestCompilePolicy_ArraysOwnTheirLines(t *testing.T) {
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
	owns := func(name string, addr unsafe.Pointer, bytes uintptr) {
		t.Helper()
		if uintptr(addr)%cacheline.Size != 0 || bytes%cacheline.Size != 0 {
			t.Errorf("%s: %d bytes at %p, not whole lines of its own", name, bytes, addr)
		}
	}
	owns("policy", unsafe.Pointer(cp), unsafe.Sizeof(policyLines{}))
	owns("rules", unsafe.Pointer(unsafe.SliceData(cp.rules)), uintptr(cap(cp.rules))*unsafe.Sizeof(cp.rules[0]))
	owns("candidates", unsafe.Pointer(unsafe.SliceData(cp.candidates)), uintptr(cap(cp.candidates))*unsafe.Sizeof(cp.candidates[0]))
	owns("overrideAttrs", unsafe.Pointer(unsafe.SliceData(cp.overrideAttrs)), uintptr(cap(cp.overrideAttrs))*unsafe.Sizeof(cp.overrideAttrs[0]))
	for _, r := range cp.rules {
		owns(r.Name+".attrs", unsafe.Pointer(unsafe.SliceData(r.attrs)), uintptr(cap(r.attrs))*unsafe.Sizeof(r.attrs[0]))
	}
}
