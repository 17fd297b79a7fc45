package config

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestParse_CostRuleMoneyInDollars: a cost rule's limit, soft_limit and
// reserve_amount are dollars, exactly, with or without "$" when written
// with a point; other rules' limits stay counts.
func TestParse_CostRuleMoneyInDollars(t *testing.T) {
	for _, tt := range []struct {
		limit string
		want  int64
	}{
		{"$500", 500_000_000}, {"$0.0005", 500}, {"12.50", 12_500_000}, {"$1,250.25", 1_250_250_000}, {`"$3"`, 3_000_000}, {"0", 0},
	} {
		yaml := "rules:\n  - name: spend\n    kind: budget\n    subject: org\n    metric: cost\n    limit: " + tt.limit +
			"\n    soft_limit: $0.0001\n    reserve: fixed\n    reserve_amount: $0.0001\n    period: month\n"
		c, err := Parse([]byte(yaml), nil)
		if err != nil {
			t.Fatalf("limit %s: %v", tt.limit, err)
		}
		r := c.Rules[0]
		if r.Limit != tt.want || r.ReserveAmount != 100 || r.SoftLimit != 100 {
			t.Errorf("limit %s: limit %d, soft %d, reserve %d; want %d, 100, 100", tt.limit, r.Limit, r.SoftLimit, r.ReserveAmount, tt.want)
		}
	}
	c, err := Parse([]byte("rules:\n  - name: tpd\n    kind: budget\n    subject: org\n    metric: tokens\n    limit: 2000000\n    period: day\n"), nil)
	if err != nil || c.Rules[0].Limit != 2_000_000 {
		t.Fatalf("a token budget: %v", err)
	}
}

// TestParse_RuleStrictness: a rule decoded through its own UnmarshalYAML
// still refuses unknown fields, its match's included.
func TestParse_RuleStrictness(t *testing.T) {
	_, err := Parse([]byte("rules:\n  - name: r\n    kind: rate\n    subject: key\n    limit: 1\n    window: 1m\n    match: {model: [x]}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "field model not found in type sluice.Match") {
		t.Fatalf("err = %v", err)
	}
}

func TestDollars_Cents(t *testing.T) {
	for d, want := range map[Dollars]string{500_000_000: "500.00", 500: "0.0005", 1_234_500_000: "1,234.50", 0: "0.00", 1_000_000_000_000: "1,000,000.00"} {
		if got := d.Cents(); got != want {
			t.Errorf("Dollars(%d).Cents() = %q, want %q", d, got, want)
		}
	}
	_ = sluice.MetricCost
}
