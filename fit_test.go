package sluice_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

// prices in micro-dollars per million tokens: 2 and 10 micro-dollars a
// token.
var fitPrice = sluice.Price{Input: 2_000_000, Output: 10_000_000}

// fitRequest is a request for key k of in input tokens and an output cap of
// out, priced with p when p is not nil.
func fitRequest(in, out int64, p *sluice.Price) sluice.Request {
	req := tokens("k", in, out)
	if p != nil {
		req.Max.Cost = p.Cost(req.Max)
		req.OutputPrice = p.Output
	}
	return req
}

func named(r sluice.Rule, name string) sluice.Rule {
	r.Name = name
	return r
}

func TestLimiter_FitReturnsLargestOutputThatFits(t *testing.T) {
	estimate := daily(sluice.MetricTokens, 100)
	estimate.Name, estimate.Reserve = "estimate", sluice.ReserveEstimate
	shadow := daily(sluice.MetricTokens, 10)
	shadow.Name, shadow.Mode = "shadow", sluice.ModeShadow
	tests := []struct {
		name  string
		rules []sluice.Rule
		used  sluice.Usage // settled first, with a bound equal to it
		price *sluice.Price
		in    int64
		out   int64
		want  int64
	}{
		{"tokens budget with room for part", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{InputTokens: 700}, nil, 100, 500, 200},
		{"output tokens budget", []sluice.Rule{daily(sluice.MetricOutputTokens, 1000)}, sluice.Usage{OutputTokens: 700}, nil, 100, 500, 300},
		{"input tokens budget is not output's business", []sluice.Rule{daily(sluice.MetricInputTokens, 1000)}, sluice.Usage{InputTokens: 850}, nil, 100, 500, 500},
		{"cost budget", []sluice.Rule{daily(sluice.MetricCost, 1_000_000)}, sluice.Usage{Cost: 600_000}, &fitPrice, 1000, 50_000, 39_800},
		{"cost budget without an output price is left to Admit", []sluice.Rule{daily(sluice.MetricCost, 1_000_000)}, sluice.Usage{Cost: 600_000}, nil, 1000, 50_000, 50_000},
		{"token bucket", []sluice.Rule{tpm(1000)}, sluice.Usage{InputTokens: 600}, nil, 100, 500, 300},
		{"the tightest rule decides", []sluice.Rule{tpm(2000), daily(sluice.MetricTokens, 10_000), named(daily(sluice.MetricOutputTokens, 1000), "out")},
			sluice.Usage{InputTokens: 100, OutputTokens: 800}, nil, 100, 500, 200},
		{"a request that fits keeps its cap", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{InputTokens: 100}, nil, 100, 50, 50},
		{"exactly full keeps its cap", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{InputTokens: 400}, nil, 100, 500, 500},
		{"exhausted budget", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{InputTokens: 1000}, nil, 100, 500, 0},
		{"overrun budget", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{InputTokens: 900, OutputTokens: 900}, nil, 100, 500, 0},
		{"room for the input only", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{InputTokens: 900}, nil, 100, 500, 0},
		{"too large for the budget", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{}, nil, 100, 5000, 900},
		{"too large and partly used", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{InputTokens: 300}, nil, 100, 5000, 600},
		{"too large for the bucket", []sluice.Rule{tpm(1000)}, sluice.Usage{}, nil, 200, 2000, 800},
		{"too large in cost", []sluice.Rule{daily(sluice.MetricCost, 1_000_000)}, sluice.Usage{}, &fitPrice, 1000, 1_000_000, 99_800},
		{"input alone too large", []sluice.Rule{daily(sluice.MetricTokens, 1000)}, sluice.Usage{}, nil, 1001, 10, 0},
		{"requests, concurrency, estimates and shadows do not bound output",
			[]sluice.Rule{rpm(1), inFlight(1), estimate, shadow}, sluice.Usage{InputTokens: 95}, nil, 10, 500, 500},
		{"no rules", nil, sluice.Usage{}, nil, 10, 500, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := withRules(t, tt.rules...)
			if !tt.used.IsZero() {
				prior := sluice.Request{Identity: ident("k"), Max: sluice.Usage{InputTokens: 1}}
				settle(t, admit(t, l, prior), tt.used)
			}
			before, err := l.Effective(context.Background(), ident("k"))
			if err != nil {
				t.Fatal(err)
			}
			req := fitRequest(tt.in, tt.out, tt.price)
			got, err := l.Fit(context.Background(), req)
			if err != nil || got != tt.want {
				t.Fatalf("Fit = %d, %v; want %d", got, err, tt.want)
			}
			after, _ := l.Effective(context.Background(), ident("k"))
			for i := range before {
				if before[i].Used != after[i].Used {
					t.Fatalf("Fit charged %s: used %d, then %d", before[i].Rule, before[i].Used, after[i].Used)
				}
			}
			if tt.want == tt.out || tt.want == 0 || tt.price == nil && hasCost(tt.rules) {
				return
			}
			// The cap is exact: it is admitted, one more token is not.
			more := fitRequest(tt.in, tt.want+1, tt.price)
			if r, err := l.Admit(context.Background(), more); err == nil {
				_ = r.Release(context.Background())
				t.Fatalf("an output cap of %d is admitted too: Fit was not the largest", tt.want+1)
			}
			settle(t, admit(t, l, fitRequest(tt.in, tt.want, tt.price)), sluice.Usage{})
		})
	}
}

func hasCost(rules []sluice.Rule) bool {
	for _, r := range rules {
		if r.Metric == sluice.MetricCost {
			return true
		}
	}
	return false
}

// The cap Fit returns, priced again the way the request's bound was, must
// be admitted. With a price that is not a whole number of micro-dollars per
// token, the input's share of Max.Cost loses its rounding when Fit takes
// the output away, and Fit offers a cap that then costs one micro-dollar
// too much.
func TestLimiter_FitCostCapIsAdmittedAfterRounding(t *testing.T) {
	price := sluice.Price{Input: 1_500_000, Output: 1_500_000} // 1.5 micro-dollars a token
	l, _ := withRules(t, daily(sluice.MetricCost, 4))
	req := fitRequest(1, 3, &price) // costs ceil(1.5 + 4.5) = 6
	got, err := l.Fit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	fitted := fitRequest(1, got, &price)
	if _, err := l.Admit(context.Background(), fitted); err != nil {
		t.Fatalf("Fit offered %d output tokens costing %d of 4: %v", got, fitted.Max.Cost, err)
	}
}

func TestLimiter_FitRejectsNegativeBound(t *testing.T) {
	l, _ := withRules(t, daily(sluice.MetricTokens, 1000))
	if _, err := l.Fit(context.Background(), tokens("k", 1, -1)); !errors.Is(err, sluice.ErrInvalidUsage) {
		t.Fatalf("Fit with a negative bound: %v, want ErrInvalidUsage", err)
	}
}
