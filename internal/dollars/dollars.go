// Package dollars writes amounts of micro-dollars, the unit every counter
// and ledger holds, in dollars as people read them: exactly, never
// through a float.
package dollars

import (
	"strconv"
	"strings"
)

// Decimal writes micro-dollars n in dollars, exactly, with no more
// decimals than it needs: "500", "0.000123", "-2.5".
func Decimal(n int64) string {
	sign := ""
	v := uint64(n)
	if n < 0 {
		sign, v = "-", uint64(-n) // -MinInt64 wraps to its own magnitude as a uint64
	}
	whole, frac := v/1_000_000, v%1_000_000
	if frac == 0 {
		return sign + strconv.FormatUint(whole, 10)
	}
	f := strconv.FormatUint(frac+1_000_000, 10)[1:] // six digits, leading zeros kept
	return sign + strconv.FormatUint(whole, 10) + "." + strings.TrimRight(f, "0")
}

// Text is Decimal with a dollar sign, as the APIs write money: "$500",
// "$0.000123", "-$2.5" (what a rate rule in debt has left).
func Text(n int64) string {
	if n < 0 {
		return "-$" + Decimal(n)[1:]
	}
	return "$" + Decimal(n)
}

// Cents writes micro-dollars n in dollars with at least two decimals and
// as many more as it needs, thousands separated: "500.00", "0.000123",
// "1,234.50", "-2.50".
func Cents(n int64) string {
	whole, frac, _ := strings.Cut(Decimal(n), ".")
	for len(frac) < 2 {
		frac += "0"
	}
	sign := ""
	if strings.HasPrefix(whole, "-") {
		sign, whole = "-", whole[1:]
	}
	var b strings.Builder
	for i, ch := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return sign + b.String() + "." + frac
}

// Money is Cents with a dollar sign, as messages write money: "$1.01",
// "$0.000123", "-$2.50".
func Money(n int64) string {
	if n < 0 {
		return "-$" + Cents(n)[1:]
	}
	return "$" + Cents(n)
}
