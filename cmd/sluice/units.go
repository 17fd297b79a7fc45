package main

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/human"
)

// limitWithUnit writes a rule's limit with its unit and what it is per:
// "$500.00 per month", "2,000,000 tokens per day", "20 requests per
// minute", "16 calls in flight".
func limitWithUnit(r sluice.Rule) string {
	if r.Limit == 0 {
		return "0 (disabled)"
	}
	var amount string
	switch r.Metric {
	case sluice.MetricCost:
		amount = "$" + config.Dollars(r.Limit).Cents()
	case "", sluice.MetricRequests:
		amount = count(r.Limit) + " requests"
		if r.Kind == sluice.KindConcurrency {
			amount = count(r.Limit) + " calls"
		}
	case sluice.MetricConcurrency:
		amount = count(r.Limit) + " calls"
	case sluice.MetricTokens:
		amount = count(r.Limit) + " tokens"
	case sluice.MetricInputTokens:
		amount = count(r.Limit) + " input tokens"
	case sluice.MetricUncachedInputTokens:
		amount = count(r.Limit) + " uncached input tokens"
	case sluice.MetricOutputTokens:
		amount = count(r.Limit) + " output tokens"
	default:
		amount = count(r.Limit) + " " + string(r.Metric)
	}
	switch r.Kind {
	case sluice.KindBudget:
		return amount + " per " + string(r.Period)
	case sluice.KindConcurrency:
		return amount + " in flight"
	}
	if r.LimitFrom == sluice.LimitFromProvider {
		// The provider's figure replaces it once the provider has said.
		return amount + " per " + human.Per(r.Window) + ", then the provider's"
	}
	return amount + " per " + human.Per(r.Window)
}
