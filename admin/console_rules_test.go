package admin

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// ruleRowOf returns the table row of page whose data-rule is rule, its tags
// stripped and its spaces squeezed.
func ruleRowOf(t *testing.T, page, rule string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-rule="` + regexp.QuoteMeta(rule) + `">(.*?)</tr>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no row for rule %s", rule)
	}
	text := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], " ")
	return strings.Join(strings.Fields(text), " ")
}

// The rules page shows a per-key rule made for keys' own limits as per key
// with its override count, not as a rule turned off, and each rule's match.
func TestConsole_RulesShowPerKeyRulesAndMatch(t *testing.T) {
	e := newEnv(t)
	for _, user := range []string{"ada", "alan"} {
		e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{"workspace": "acme", "user": user,
			"limits": map[string]any{"requests_per_minute": 60}})
	}
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "small_only", "kind": "rate", "subject": "workspace", "limit": 5, "window": "1m",
		"match": map[string]any{"models": []string{"mock-small"}, "tiers": []string{"free"}}})
	b := e.browser()
	b.login(rootToken)
	status, page := b.get("/ui/rules")
	if status != http.StatusOK {
		t.Fatalf("GET /ui/rules = %d", status)
	}
	if row := ruleRowOf(t, page, KeyRuleRequestsPerMinute); !strings.Contains(row, "per key: 2 overrides") || strings.Contains(row, "0: off") {
		t.Errorf("the per-key rule's row = %q, want it per key with 2 overrides", row)
	}
	if row := ruleRowOf(t, page, "small_only"); !strings.Contains(row, "models mock-small; tiers free") {
		t.Errorf("a matched rule's row = %q, want its match", row)
	}
	if row := ruleRowOf(t, page, "daily_token_budget"); !strings.Contains(row, "every call") {
		t.Errorf("an unmatched rule's row = %q, want every call", row)
	}
}

// The audit log shows what changed, field by field, not raw JSON.
func TestConsole_AuditShowsAReadableDiff(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	e.must(http.StatusCreated, "POST", "/admin/v1/budgets", rootToken, map[string]any{
		"name": "spend", "subject": "workspace", "metric": "cost", "limit": "$50", "period": "month"})
	e.must(http.StatusOK, "PUT", "/admin/v1/rules/spend", rootToken, map[string]any{
		"name": "spend", "kind": "budget", "subject": "workspace", "metric": "cost", "limit": "$25", "period": "month"})
	b := e.browser()
	b.login(rootToken)
	_, page := b.get("/ui/audit?action=rule.update")
	if !strings.Contains(page, `<b>limit</b> <del>$50</del> → <ins>$25</ins>`) {
		t.Errorf("the rule update's diff lacks limit $50 → $25:\n%s", page)
	}
	if strings.Contains(page, `<b>period</b>`) || strings.Contains(page, `{&#34;`) {
		t.Errorf("the diff shows an unchanged field or raw JSON:\n%s", page)
	}
}
