package llm

import "testing"

func TestTokensForBytes_RoundsUp(t *testing.T) {
	for _, c := range []struct{ in, want int64 }{{-1, 0}, {0, 0}, {1, 1}, {3, 1}, {4, 2}, {3000, 1000}} {
		if got := TokensForBytes(c.in); got != c.want {
			t.Errorf("TokensForBytes(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestBound_OutputTokensMultipliesN(t *testing.T) {
	cases := []struct {
		b    Bound
		want int64
	}{
		{Bound{MaxOutputTokens: 100, HasMaxOutput: true, N: 3}, 300},
		{Bound{N: 3}, 0},
	}
	for _, c := range cases {
		if got := c.b.OutputTokens(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.b, got, c.want)
		}
	}
}

func TestUsage_Uncached(t *testing.T) {
	u := Usage{InputTokens: 100, CachedInputTokens: 30, CacheWriteTokens: 20, OutputTokens: 5}
	if u.UncachedInputTokens() != 50 || u.TotalTokens() != 105 {
		t.Errorf("%+v: uncached %d total %d", u, u.UncachedInputTokens(), u.TotalTokens())
	}
}
