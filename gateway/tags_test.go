package gateway_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

func TestGateway_TagsAttribute(t *testing.T) {
	t.Parallel()
	perTag := sluice.Rule{Name: "per_tag", Kind: sluice.KindBudget, Subject: "tag", Limit: 100, Period: sluice.PeriodDay}
	long := strings.Repeat("t", 65)
	cases := []struct {
		name, header string
		want         []string
	}{
		{"None", "", nil},
		{"Trimmed", " alpha , beta,, ", []string{"alpha", "beta"}},
		{"TooLongDropped", "alpha," + long, []string{"alpha"}},
		{"AtMostEight", "a,b,c,d,e,f,g,h,i,j", []string{"a", "b", "c", "d", "e", "f", "g", "h"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, []sluice.Rule{perTag})
			if r := h.post("/v1/chat/completions", smallChat, map[string]string{gateway.HeaderTags: c.header}); r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			rec := h.rec.waitUsage(t, 1)[0]
			if !slices.Equal(rec.Tags, c.want) {
				t.Errorf("ledger tags %q, want %q", rec.Tags, c.want)
			}
			for _, tag := range c.want {
				id := sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1", Tags: []string{tag}}
				if got := h.usedBy(id, "per_tag"); got != 1 {
					t.Errorf("tag %q counted %d, want 1", tag, got)
				}
			}
			if slices.Contains(c.want, long) {
				t.Error("an over-long tag was kept")
			}
		})
	}
}

// A tag that is not valid UTF-8 is refused 400 invalid_tags before anything
// is charged: such a byte must never reach a counter key or the ledger,
// where a database refusing it would fail the writes of every tenant.
func TestGateway_TagsWithABadByteRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyTokens})
	r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{gateway.HeaderTags: "team-a,\xffbad"})
	if r.status != 400 || codeOf(openaiError(t, r)) != "invalid_tags" {
		t.Fatalf("%d %s, want 400 invalid_tags", r.status, r.body)
	}
	if n := h.mockCalls(); n != 0 || h.used("daily_tokens") != 0 {
		t.Fatalf("provider called %d times, budget %d: want nothing", n, h.used("daily_tokens"))
	}
}
