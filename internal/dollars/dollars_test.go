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

func TestCentsAndMoney(t *testing.T) {
	for _, c := range []struct {
		micros       int64
		cents, money string
	}{
		{0, "0.00", "$0.00"},
		{1_010_000, "1.01", "$1.01"},
		{1_000_000, "1.00", "$1.00"},
		{123, "0.000123", "$0.000123"},
		{1_234_500_000, "1,234.50", "$1,234.50"},
		{-2_500_000, "-2.50", "-$2.50"},
	} {
		if got := Cents(c.micros); got != c.cents {
			t.Errorf("Cents(%d) = %q, want %q", c.micros, got, c.cents)
		}
		if got := Money(c.micros); got != c.money {
			t.Errorf("Money(%d) = %q, want %q", c.micros, got, c.money)
		}
	}
}
