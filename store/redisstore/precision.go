package redisstore

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
)

// Bounds of exact arithmetic in the scripts (see the package documentation).
const (
	maxRateProduct = 1 << 50
	maxBudget      = 1 << 51
)

// bucket is a rate charge's bucket in the scripts' units: capacity burst,
// refill of W microseconds per L units.
type bucket struct{ burst, w, l int64 }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// bucketOf reduces a rate charge's refill to integers the scripts handle
// exactly, or fails with ErrPrecision.
func bucketOf(c *sluice.Charge) (bucket, error) {
	return rateBucket(c.Limit, c.BurstOrLimit(), c.Window)
}

func rateBucket(limit, burst int64, window time.Duration) (bucket, error) {
	if limit <= 0 || burst <= 0 {
		return bucket{}, fmt.Errorf("%w: rate limit %d and burst %d must be positive", ErrPrecision, limit, burst)
	}
	if window <= 0 || window%time.Microsecond != 0 {
		return bucket{}, fmt.Errorf("%w: rate window %v is not a positive whole number of microseconds", ErrPrecision, window)
	}
	w := int64(window / time.Microsecond)
	g := gcd(limit, w)
	b := bucket{burst: burst, w: w / g, l: limit / g}
	hi, lo := bits.Mul64(uint64(b.burst), uint64(b.w))
	if hi != 0 || lo > maxRateProduct || b.l > maxRateProduct {
		return bucket{}, fmt.Errorf("%w: a rate of %d per %v with a burst of %d needs burst×window/gcd(limit, window µs) <= 2^50 and limit/gcd <= 2^50 (have %d×%d and %d): use a rounder limit or a shorter window",
			ErrPrecision, limit, window, burst, b.burst, b.w, b.l)
	}
	return b, nil
}

// Check reports whether the store can enforce r exactly at its configured
// limit (ErrPrecision otherwise). Overrides and tiers that change the limit
// are checked again at admission.
func Check(r sluice.Rule) error {
	switch r.Kind {
	case sluice.KindRate:
		burst := r.Burst
		if burst <= 0 {
			burst = r.Limit
		}
		_, err := rateBucket(r.Limit, burst, r.Window)
		return err
	default:
		if r.Limit > maxBudget {
			return fmt.Errorf("%w: limit %d is above 2^51", ErrPrecision, r.Limit)
		}
	}
	return nil
}

// checkCharge validates a budget or concurrency charge's figures.
func checkCharge(c *sluice.Charge) error {
	if c.Limit > maxBudget || c.Amount > maxBudget || c.Amount < 0 {
		return fmt.Errorf("%w: %s charge of %d against a limit of %d (both must be in [0, 2^51])", ErrPrecision, c.Kind, c.Amount, c.Limit)
	}
	return nil
}
