package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A rule on uncached_input_tokens reserves every input token (cache reads
// are unknown before the call) and keeps, at settlement, only those not
// read from a cache: a limit copied from a provider's input limit that
// leaves cache reads out refuses what the provider would refuse, no more.
func TestLimiter_UncachedInputTokens(t *testing.T) {
	itpm := sluice.Rule{Name: "itpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricUncachedInputTokens, Limit: 1000, Window: time.Minute}
	l, _ := withRules(t, itpm)
	r := admit(t, l, tokens("k", 800, 50))
	if used := effective(t, l, ident("k"), "itpm").Used; used != 800 {
		t.Fatalf("reserved %d, want every input token (800)", used)
	}
	settle(t, r, sluice.Usage{InputTokens: 800, CachedInputTokens: 600, OutputTokens: 50})
	if used := effective(t, l, ident("k"), "itpm").Used; used != 200 {
		t.Fatalf("after settlement %d, want the 200 input tokens not read from the cache", used)
	}
	settle(t, admit(t, l, tokens("k", 800, 50)), sluice.Usage{InputTokens: 800, CachedInputTokens: 800})
	refuse(t, l, tokens("k", 900, 0), sluice.ErrRateLimited)
}
