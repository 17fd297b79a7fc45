package memstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Counters reloaded from a journal owe no eviction scan; counters made by
// admissions do.
func TestStore_RestoredBudgetsOweNoScan(t *testing.T) {
	s := New(Options{Shards: 2})
	end := time.Unix(0, 0).Add(24 * time.Hour)
	for i := range 1000 {
		s.RestoreBudget(sluice.CounterKey{Rule: 7, Subject: fmt.Sprint(i), Period: 1}, end, 5)
	}
	for i := range s.shards {
		if made := s.shards[i].made; made != 0 {
			t.Fatalf("shard %d owes a scan for %d counters after a restore, want 0", i, made)
		}
	}
	if n := s.Len(); n != 1000 {
		t.Fatalf("%d counters restored, want 1000", n)
	}
	sh := &s.shards[0]
	sh.get(sluice.CounterKey{Rule: 1, Subject: "new"})
	if sh.made != 1 {
		t.Fatalf("a counter made by an admission counts %d toward the scan, want 1", sh.made)
	}
}
