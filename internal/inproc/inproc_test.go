package inproc_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/inproc"
)

// TestKind_StringIsTheRuleKind: each kind's name is the sluice.Kind of the
// rules it counts for, which stores and the admin API report.
func TestKind_StringIsTheRuleKind(t *testing.T) {
	for k, want := range map[inproc.Kind]sluice.Kind{inproc.Rate: sluice.KindRate, inproc.Budget: sluice.KindBudget,
		inproc.Concurrency: sluice.KindConcurrency, 0: ""} {
		if got := sluice.Kind(k.String()); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
