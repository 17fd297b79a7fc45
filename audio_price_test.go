package sluice_test

import (
	"testing"

	"github.com/sluicehq/sluice"
)

// Audio tokens are priced at the audio rates, the rest at the text rates;
// a price without audio rates prices them as text.
func TestPrice_CostPricesAudioApart(t *testing.T) {
	// gpt-realtime's list prices, in micro-dollars per million tokens.
	realtime := sluice.Price{Input: 4_000_000, CachedInput: 400_000, Output: 16_000_000, AudioInput: 32_000_000, AudioOutput: 64_000_000}
	for _, tc := range []struct {
		name  string
		price sluice.Price
		u     sluice.Usage
		want  int64
	}{
		{"text only", realtime, sluice.Usage{InputTokens: 1000, OutputTokens: 100}, 4000 + 1600},
		// 1,000 input: 200 cached, 500 audio, 300 text; 100 output: 60 audio, 40 text.
		{"audio apart", realtime, sluice.Usage{InputTokens: 1000, CachedInputTokens: 200, AudioInputTokens: 500, OutputTokens: 100, AudioOutputTokens: 60},
			300*4 + 200*0.4 + 500*32 + 40*16 + 60*64},
		{"no audio rates", sluice.Price{Input: 4_000_000, Output: 16_000_000}, sluice.Usage{InputTokens: 1000, AudioInputTokens: 500, OutputTokens: 100, AudioOutputTokens: 100},
			4000 + 1600},
		// Audio counts at most the tokens it is part of.
		{"audio over its whole", realtime, sluice.Usage{InputTokens: 100, AudioInputTokens: 500, OutputTokens: 10, AudioOutputTokens: 50}, 100*32 + 10*64},
	} {
		if got := tc.price.Cost(tc.u); got != tc.want {
			t.Errorf("%s: %d micro-dollars, want %d", tc.name, got, tc.want)
		}
	}
}
