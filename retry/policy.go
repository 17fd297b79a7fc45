package retry

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Clock tells a [Policy] the time and waits for it to pass. A nil Clock means
// real time. Its method set is that of sluice.Clock, so the engine's clock
// (or a test's fake) serves here too. A context's deadline is always real
// time, whatever the Clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Defaults of a zero [Policy].
const (
	defaultMaxAttempts = 4
	defaultBaseDelay   = 250 * time.Millisecond
	defaultMaxDelay    = 30 * time.Second
	defaultMaxHint     = 60 * time.Second
	// maxDefaultHintSlack caps the default upward jitter added to a hint.
	maxDefaultHintSlack = time.Second
)

// Policy says how often and how long to retry. The zero value is ready to
// use: 4 attempts, backoff from 250ms to 30s, server hints of up to 60s
// honoured. A Policy is a value that is only read, so one may be shared by
// any number of goroutines if its hooks are safe for concurrent use.
type Policy struct {
	// MaxAttempts is the most attempts made, the first included; 1 turns
	// retries off. Zero or negative means 4.
	MaxAttempts int
	// BaseDelay is the backoff cap after the first failed attempt; it doubles
	// with each attempt up to MaxDelay. Zero or negative means 250ms.
	BaseDelay time.Duration
	// MaxDelay is the largest backoff cap. It does not shorten a server's
	// hint. Zero or negative means 30s.
	MaxDelay time.Duration
	// MaxHint is the longest server hint (retry-after-ms, Retry-After) the
	// policy waits for. A longer one ends the attempts at once: for this
	// caller the refusal is terminal, and waiting is for batch work with its
	// own policy. Zero means 60s; negative means no hint is honoured.
	MaxHint time.Duration
	// HintSlack is the most random delay added after a server's hint, so
	// clients told the same moment do not all come back in the same
	// millisecond. The wait is never shorter than the hint. Zero means a
	// tenth of the hint, at most one second; negative means none.
	HintSlack time.Duration
	// Jitter returns a random duration in [0, max]; a result out of range is
	// clamped. Nil means uniform from math/rand/v2.
	Jitter func(max time.Duration) time.Duration
	// Clock supplies the time for HTTP-date hints and the timer for waits.
	// Nil means real time.
	Clock Clock
	// OnRetry, if set, is called before each wait with the number of the
	// attempt that failed, its classification and the wait: the place to
	// count retries and their classes.
	OnRetry func(attempt int, d Decision, delay time.Duration)
}

// Delay reports how long to wait before the attempt after attempt (numbered
// from 1) whose outcome was d, and false when there must be no further
// attempt: d is not retryable, attempt reached MaxAttempts, or the server's
// hint is longer than MaxHint.
//
// With a hint, the wait is the hint plus up to HintSlack of upward jitter,
// however long MaxDelay is. Without one, it is full jitter: uniform in
// [0, min(MaxDelay, BaseDelay*2^(attempt-1))].
func (p Policy) Delay(attempt int, d Decision) (time.Duration, bool) {
	if !d.Retryable() || attempt >= p.maxAttempts() {
		return 0, false
	}
	if d.HasHint {
		if p.MaxHint < 0 || d.Hint > p.maxHint() {
			return 0, false
		}
		return saturatingAdd(d.Hint, p.jitter(p.hintSlack(d.Hint))), true
	}
	return p.jitter(p.backoffCap(attempt)), true
}

func (p Policy) maxAttempts() int {
	if p.MaxAttempts <= 0 {
		return defaultMaxAttempts
	}
	return p.MaxAttempts
}

func (p Policy) maxHint() time.Duration {
	if p.MaxHint == 0 {
		return defaultMaxHint
	}
	return p.MaxHint
}

func (p Policy) hintSlack(hint time.Duration) time.Duration {
	switch {
	case p.HintSlack < 0:
		return 0
	case p.HintSlack > 0:
		return p.HintSlack
	}
	return min(hint/10, maxDefaultHintSlack)
}

// backoffCap is BaseDelay doubled for each attempt after the first, capped
// at MaxDelay.
func (p Policy) backoffCap(attempt int) time.Duration {
	base, ceiling := p.BaseDelay, p.MaxDelay
	if base <= 0 {
		base = defaultBaseDelay
	}
	if ceiling <= 0 {
		ceiling = defaultMaxDelay
	}
	limit := base
	for n := 1; n < attempt && limit < ceiling; n++ {
		if limit > ceiling/2 {
			return ceiling
		}
		limit *= 2
	}
	return min(limit, ceiling)
}

// jitter draws a duration in [0, limit].
func (p Policy) jitter(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	if p.Jitter != nil {
		return min(max(p.Jitter(limit), 0), limit)
	}
	if limit == math.MaxInt64 {
		return rand.N(limit)
	}
	return rand.N(limit + 1)
}

func (p Policy) now() time.Time {
	if p.Clock == nil {
		return time.Now()
	}
	return p.Clock.Now()
}

// wait blocks for d or until ctx is done, whichever comes first, and returns
// ctx's error in the second case.
func (p Policy) wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	var elapsed <-chan time.Time
	if p.Clock == nil {
		timer := time.NewTimer(d)
		defer timer.Stop()
		elapsed = timer.C
	} else {
		elapsed = p.Clock.After(d)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-elapsed:
		return nil
	}
}

func saturatingAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
