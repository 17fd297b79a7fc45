package config

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/dollars"
)

// Dollars is an amount of money in micro-dollars. In YAML it is written in
// dollars as an exact decimal with at most six decimal places (0.15, 3,
// 15.00), and read from the text as written, never through a float: a price
// of 0.15 dollars per million tokens is Dollars(150000).
type Dollars int64

// maxWholeDollars bounds the integer part so that the conversion cannot
// overflow: 9,223,372 million dollars is past any price.
const maxWholeDollars = (1<<63 - 1) / 1_000_000

// ParseDollars reads an amount in dollars: digits, optionally a point and up
// to six more digits. Signs, exponents, separators and spaces are refused.
func ParseDollars(s string) (Dollars, error) {
	bad := func(why string) (Dollars, error) {
		return 0, fmt.Errorf("%q is not an amount in dollars: %s (write it like 0.15 or 3)", s, why)
	}
	whole, frac, hasPoint := strings.Cut(s, ".")
	if whole == "" {
		if strings.HasPrefix(s, "-") {
			return bad("negative")
		}
		return bad("no digits before the point")
	}
	if hasPoint && frac == "" {
		return bad("no digits after the point")
	}
	if len(frac) > 6 {
		return bad("more than 6 decimal places")
	}
	for _, part := range []string{whole, frac} {
		for _, r := range part {
			if r < '0' || r > '9' {
				if r == '-' {
					return bad("negative")
				}
				return bad("only digits and one point are allowed")
			}
		}
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > maxWholeDollars {
		return bad("too large")
	}
	micro := w * 1_000_000
	if frac != "" {
		f, _ := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		micro += f
	}
	if micro < 0 {
		return bad("too large")
	}
	return Dollars(micro), nil
}

// String writes d in dollars with no trailing zeros: "0.15", "3",
// "15.000001".
func (d Dollars) String() string { return dollars.Decimal(int64(d)) }

// UnmarshalYAML reads a scalar's text exactly (see ParseDollars); a quoted
// number ("3") is accepted as well.
func (d *Dollars) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: an amount in dollars must be a number, like 0.15", node.Line)}}
	}
	v, err := ParseDollars(node.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", node.Line, err)}}
	}
	*d = v
	return nil
}

// MarshalYAML writes d as a plain decimal number.
func (d Dollars) MarshalYAML() (any, error) {
	s := d.String()
	tag := "!!int"
	if strings.Contains(s, ".") {
		tag = "!!float"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s}, nil
}
