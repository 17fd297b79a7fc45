package memstore

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/inproc"
)

// randFigure returns a bucket figure: small, near a power of two, or near
// the edges of int64, where 64-bit shortcuts would overflow.
func randFigure(rng *rand.Rand) int64 {
	switch rng.IntN(6) {
	case 0:
		return rng.Int64N(10)
	case 1:
		return rng.Int64N(1_000_000)
	case 2:
		return int64(1)<<rng.IntN(63) + rng.Int64N(3) - 1
	case 3:
		return math.MaxInt64 - rng.Int64N(3)
	case 4:
		return int64(60 * 1e9)
	}
	return rng.Int64()
}

// randCounter returns a rate counter at now: full, or drawn a little or a
// lot, at the bucket's limit or another.
func randCounter(rng *rand.Rand, now, limit int64) counter {
	c := counter{drawnAt: limit}
	switch rng.IntN(4) {
	case 0:
		c.tat = now - rng.Int64N(1e9)
	case 1:
		c.tat = now
	case 2:
		c.tat, c.frac = now, rng.Int64N(max(1, limit))
	default:
		c.tat, c.frac = now+randFigure(rng)%(1<<40), rng.Int64N(max(1, limit))
	}
	if rng.IntN(4) == 0 {
		c.drawnAt = max(1, randFigure(rng))
	}
	if rng.IntN(8) == 0 {
		c.drawnAt = 0
	}
	return c
}

// The shortcuts of check and adjust agree with their exact forms to the
// last field, whatever the figures.
func TestBucket_ShortcutsAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const now = int64(1_700_000_000_000_000_000)
	for i := range 200_000 {
		b := bucket{limit: max(1, randFigure(rng)), burst: max(1, randFigure(rng)), window: max(1, randFigure(rng))}
		c := randCounter(rng, now, b.limit)
		amount := randFigure(rng)
		if rng.IntN(4) == 0 {
			amount = min(amount, b.burst)
		}

		fast, exact := inproc.Charge{Amount: amount}, inproc.Charge{Amount: amount}
		fc, ec := c, c
		ft, ff := b.check(&fc, &fast, now)
		et, ef := b.checkExact(&ec, &exact, now)
		if ft != et || ff != ef || fast != exact || fc != ec {
			t.Fatalf("#%d: check %+v on %+v, amount %d: got (%d, %d) %+v, want (%d, %d) %+v",
				i, b, c, amount, ft, ff, fast, et, ef, exact)
		}

		delta := randFigure(rng)
		if rng.IntN(2) == 0 {
			delta = -delta
		}
		fc, ec = c, c
		b.adjust(&fc, delta, now)
		b.adjustExact(&ec, delta, now)
		if fc != ec {
			t.Fatalf("#%d: adjust %+v on %+v by %d: got %+v, want %+v", i, b, c, delta, fc, ec)
		}
	}
}
