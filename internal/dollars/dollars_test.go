package dollars

import (
	"math"
	"testing"
)

func TestDecimalAndText(t *testing.T) {
	for _, c := range []struct {
		micros        int64
		decimal, text string
	}{
		{0, "0", "$0"},
		{500_000_000, "500", "$500"},
		{123, "0.000123", "$0.000123"},
		{1_250_000, "1.25", "$1.25"},
		{150_000, "0.15", "$0.15"},
		{-2_500_000, "-2.5", "-$2.5"},
		{math.MaxInt64, "9223372036854.775807", "$9223372036854.775807"},
		{math.MinInt64, "-9223372036854.775808", "-$9223372036854.775808"},
	} {
		if got := Decimal(c.micros); got != c.decimal {
			t.Errorf("Decimal(%d) = %q, want %q", c.micros, got, c.decimal)
		}
		if got := Text(c.micros); got != c.text {
			t.Errorf("Text(%d) = %q, want %q", c.micros, got, c.text)
		}
	}
}
