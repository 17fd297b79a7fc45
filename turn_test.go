package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A six-step agent turn uses 1 of 20 requests a minute; its tokens are all
// counted. Another turn, a call without one, the same turn id on another
// key and the same turn after the window are each charged.
func TestLimiter_ATurnIsOneRequest(t *testing.T) {
	l, clock := withRules(t, rpm(20), daily(sluice.MetricTokens, 1_000_000))
	step := func(key, turn string) {
		t.Helper()
		req := tokens(key, 100, 50)
		req.Turn = turn
		settle(t, admit(t, l, req), sluice.Usage{InputTokens: 100, OutputTokens: 50})
	}
	used := func(key, rule string) int64 { return effective(t, l, ident(key), rule).Used }
	for range 6 {
		step("k", "turn-1")
	}
	if got := used("k", "rpm"); got != 1 {
		t.Fatalf("a six-step turn used %d requests, want 1", got)
	}
	if got := used("k", "daily"); got != 6*150 {
		t.Fatalf("tokens %d, want every step's", got)
	}
	step("k", "turn-2")
	step("k", "")
	step("other", "turn-1")
	if got := used("k", "rpm"); got != 3 {
		t.Fatalf("after another turn and a call without one: %d, want 3", got)
	}
	if got := used("other", "rpm"); got != 1 {
		t.Fatalf("another key's turn of the same id: %d, want 1", got)
	}
	clock.Advance(time.Minute)
	step("k", "turn-1")
	if got := used("k", "rpm"); got != 1 {
		t.Fatalf("the turn again a window later: the bucket holds %d, want 1 (charged again)", got)
	}
}

// A turn counts as one request for at most MaxTurnCalls calls.
func TestLimiter_ATurnIsBounded(t *testing.T) {
	l, _ := withRules(t, rpm(1000))
	for range sluice.MaxTurnCalls + 1 {
		req := byKey("k")
		req.Turn = "endless"
		settle(t, admit(t, l, req), sluice.Usage{})
	}
	if got := effective(t, l, ident("k"), "rpm").Used; got != 2 {
		t.Fatalf("%d calls of one turn used %d requests, want 2", sluice.MaxTurnCalls+1, got)
	}
}

// Later steps of a turn are admitted even when the bucket is empty.
func TestLimiter_ATurnsLaterStepsPassAFullBucket(t *testing.T) {
	l, _ := withRules(t, rpm(1))
	req := byKey("k")
	req.Turn = "t"
	settle(t, admit(t, l, req), sluice.Usage{})
	refuse(t, l, byKey("k"), sluice.ErrRateLimited)
	for range 5 {
		settle(t, admit(t, l, req), sluice.Usage{})
	}
}
