package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/retry"
)

var (
	transient = retry.Decision{Class: retry.Transient, Reason: "status 503"}
	terminal  = retry.Decision{Class: retry.Terminal, Reason: "x-should-retry: false"}
)

func throttled(hint time.Duration) retry.Decision {
	return retry.Decision{Class: retry.Throttled, Hint: hint, HasHint: true, Reason: "status 429"}
}

// noJitter and fullJitter pin the random draw at either end of its range.
func noJitter(time.Duration) time.Duration       { return 0 }
func fullJitter(max time.Duration) time.Duration { return max }

func TestPolicy_DelaySteps(t *testing.T) {
	capped := retry.Policy{BaseDelay: time.Second, MaxDelay: 5 * time.Second, MaxAttempts: 100, Jitter: fullJitter}
	tests := []struct {
		name    string
		policy  retry.Policy
		attempt int
		d       retry.Decision
		want    time.Duration
		wantOK  bool
	}{
		{"zero policy, first backoff cap is 250ms", retry.Policy{Jitter: fullJitter}, 1, transient, 250 * time.Millisecond, true},
		{"zero policy doubles", retry.Policy{Jitter: fullJitter}, 2, transient, 500 * time.Millisecond, true},
		{"zero policy doubles again", retry.Policy{Jitter: fullJitter}, 3, transient, time.Second, true},
		{"zero policy stops after 4 attempts", retry.Policy{Jitter: fullJitter}, 4, transient, 0, false},
		{"backoff reaches MaxDelay", capped, 4, transient, 5 * time.Second, true},
		{"backoff stays at MaxDelay", capped, 99, transient, 5 * time.Second, true},
		{"no overflow on huge attempts", retry.Policy{MaxAttempts: math.MaxInt, Jitter: fullJitter}, math.MaxInt - 1, transient, 30 * time.Second, true},
		{"base above max is max", retry.Policy{BaseDelay: time.Minute, MaxDelay: time.Second, Jitter: fullJitter}, 1, transient, time.Second, true},
		{"full jitter can be zero", retry.Policy{Jitter: noJitter}, 3, transient, 0, true},
		{"jitter clamped to cap", retry.Policy{Jitter: func(time.Duration) time.Duration { return time.Hour }}, 1, transient, 250 * time.Millisecond, true},
		{"negative jitter clamped to zero", retry.Policy{Jitter: func(time.Duration) time.Duration { return -time.Hour }}, 1, transient, 0, true},
		{"MaxAttempts 1 never retries", retry.Policy{MaxAttempts: 1}, 1, transient, 0, false},
		{"terminal never retries", retry.Policy{}, 1, terminal, 0, false},
		{"success never retries", retry.Policy{}, 1, retry.Decision{}, 0, false},
		{"throttled waits exactly the hint", retry.Policy{Jitter: noJitter}, 1, throttled(1500 * time.Millisecond), 1500 * time.Millisecond, true},
		{"hint ignores MaxDelay", retry.Policy{MaxDelay: time.Second, Jitter: noJitter}, 1, throttled(45 * time.Second), 45 * time.Second, true},
		{"hint slack is a tenth", retry.Policy{Jitter: fullJitter}, 1, throttled(2 * time.Second), 2200 * time.Millisecond, true},
		{"hint slack at most a second", retry.Policy{Jitter: fullJitter}, 1, throttled(40 * time.Second), 41 * time.Second, true},
		{"hint slack set", retry.Policy{HintSlack: 50 * time.Millisecond, Jitter: fullJitter}, 1, throttled(time.Second), 1050 * time.Millisecond, true},
		{"hint slack off", retry.Policy{HintSlack: -1, Jitter: fullJitter}, 1, throttled(time.Second), time.Second, true},
		{"hint zero retries now", retry.Policy{Jitter: fullJitter}, 1, throttled(0), 0, true},
		{"hint at MaxHint is honoured", retry.Policy{Jitter: noJitter}, 1, throttled(60 * time.Second), 60 * time.Second, true},
		{"hint past MaxHint gives up", retry.Policy{}, 1, throttled(61 * time.Second), 0, false},
		{"hint past a set MaxHint gives up", retry.Policy{MaxHint: time.Second}, 1, throttled(2 * time.Second), 0, false},
		{"negative MaxHint honours no hint", retry.Policy{MaxHint: -1}, 1, throttled(time.Millisecond), 0, false},
		{"hint still counts attempts", retry.Policy{}, 4, throttled(time.Second), 0, false},
		{"throttled without hint backs off", retry.Policy{Jitter: fullJitter}, 2, retry.Decision{Class: retry.Throttled}, 500 * time.Millisecond, true},
		{"transient with hint waits the hint", retry.Policy{Jitter: noJitter}, 1, retry.Decision{Class: retry.Transient, Hint: time.Second, HasHint: true}, time.Second, true},
		{"saturated hint does not overflow", retry.Policy{MaxHint: math.MaxInt64, Jitter: fullJitter}, 1, throttled(math.MaxInt64 - 1), math.MaxInt64, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.policy.Delay(tt.attempt, tt.d)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Delay(%d, %v) = %v, %v; want %v, %v", tt.attempt, tt.d.Class, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// The default jitter is random: check its range and that it spreads.
func TestPolicy_TransientJitterIsFullWithinCap(t *testing.T) {
	p := retry.Policy{MaxAttempts: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: 800 * time.Millisecond}
	for attempt, limit := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 9: 800 * time.Millisecond} {
		lowest, highest := time.Duration(math.MaxInt64), time.Duration(0)
		for range 2000 {
			d, ok := p.Delay(attempt, transient)
			if !ok || d < 0 || d > limit {
				t.Fatalf("attempt %d: Delay = %v, %v; want within [0, %v]", attempt, d, ok, limit)
			}
			lowest, highest = min(lowest, d), max(highest, d)
		}
		if lowest > limit/4 || highest < limit*3/4 {
			t.Errorf("attempt %d: 2000 draws spanned only [%v, %v] of [0, %v]", attempt, lowest, highest, limit)
		}
	}
}

func TestPolicy_ThrottledNeverEarlierThanHint(t *testing.T) {
	var p retry.Policy
	for _, hint := range []time.Duration{0, time.Millisecond, 1500 * time.Millisecond, 30 * time.Second} {
		slack := min(hint/10, time.Second)
		for range 2000 {
			d, ok := p.Delay(1, throttled(hint))
			if !ok || d < hint || d > hint+slack {
				t.Fatalf("hint %v: Delay = %v, %v; want within [%v, %v]", hint, d, ok, hint, hint+slack)
			}
		}
	}
}
