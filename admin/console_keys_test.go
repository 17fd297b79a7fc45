package admin

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// rowOf returns the table row of page whose attribute attr is value, or "".
func rowOf(page, attr, value string) string {
	return regexp.MustCompile(`(?s)<tr ` + attr + `="` + regexp.QuoteMeta(value) + `">.*?</tr>`).FindString(page)
}

// limitOf returns the headroom bar of rule on page, or "".
func limitOf(page, rule string) string {
	return regexp.MustCompile(`(?s)<div class="limit" data-rule="` + regexp.QuoteMeta(rule) + `">.*?<div class="figures">.*?</div>`).FindString(page)
}

// TestConsole_KeyPage: the key page shows the key's record (escaped, never
// its secret), its spend per day from the ledger (its own, not another
// key's; for a viewer, in the key's own workspace only), its own limits,
// and the limits that apply to it with their live headroom; the keys list
// links to it.
func TestConsole_KeyPage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const name = `<script>alert("x")</script> & co`
	r := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"workspace": "acme", "user": "ada", "name": name,
		"limits": map[string]any{"requests_per_minute": 30, "budget": map[string]any{"period": "day", "dollars": "2.50"}}})
	id, secret := r.body["key"].(map[string]any)["id"].(string), r.body["secret"].(string)
	otherID, _ := e.createKey("acme", "alan")
	globexID, _ := e.createKey("globex", "gus")
	now := time.Now().UTC()
	today, threeDaysAgo := now.Format(time.DateOnly), now.AddDate(0, 0, -3).Format(time.DateOnly)
	for _, u := range []catalog.UsageEntry{
		{Workspace: "acme", KeyID: id, Route: "chat", Model: "mock-small", At: now, Requests: 3, InputTokens: 1200, OutputTokens: 300, CachedInputTokens: 100, CostMicros: 4_200_000},
		{Workspace: "acme", KeyID: id, Route: "chat", Model: "mock-small", At: now.AddDate(0, 0, -3), Requests: 1, InputTokens: 500, CostMicros: 500_000},
		// Charged to a workspace the key asserted, as a service key's calls are.
		{Workspace: "beta", KeyID: id, Route: "chat", Model: "mock-small", At: now, Requests: 2, InputTokens: 7000, CostMicros: 7_000_000},
		{Workspace: "acme", KeyID: otherID, Route: "chat", Model: "mock-small", At: now, Requests: 9, InputTokens: 99_999, CostMicros: 99_000_000},
	} {
		e.cat.RecordUsage(u)
	}
	if err := e.cat.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.admit(sluice.Identity{Org: sluice.DefaultOrg, Workspace: "acme", User: "ada", Key: id}, 20_000); err != nil {
		t.Fatal(err)
	}

	b := e.browser()
	b.login(rootToken)
	status, list := b.get("/ui/keys")
	if status != http.StatusOK {
		t.Fatalf("keys page = %d:\n%s", status, list)
	}
	for _, k := range []string{id, otherID, globexID} {
		if !strings.Contains(list, `href="/ui/keys/`+k+`"`) {
			t.Errorf("the keys page has no link to key %s:\n%s", k, list)
		}
	}
	if _, acmeOnly := b.get("/ui/keys?workspace=acme"); strings.Contains(acmeOnly, globexID) || !strings.Contains(acmeOnly, otherID) {
		t.Errorf("keys of acme list globex's key or miss alan's:\n%s", acmeOnly)
	}

	status, page := b.get("/ui/keys/" + id)
	if status != http.StatusOK {
		t.Fatalf("key page = %d:\n%s", status, page)
	}
	if strings.Contains(page, "<script>") || !strings.Contains(page, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; co`) {
		t.Errorf("the key's name is not escaped:\n%s", page)
	}
	if random := secret[strings.LastIndex(secret, "-")+1:]; strings.Contains(page, random) {
		t.Error("the key page shows the key's secret")
	}
	for _, want := range []string{`<a href="/ui/workspaces/acme">acme</a>`, "<dd>ada</dd>", `<span class="badge on">active</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("key page lacks %q", want)
		}
	}
	// Spend per day: the key's own, in every workspace it was charged to.
	if row := rowOf(page, "data-day", today); !strings.Contains(row, "8,200") || !strings.Contains(row, "$11.20") || !strings.Contains(row, "<td class=\"n\">5</td>") {
		t.Errorf("today's spend row = %q, want 5 requests, 8,200 input tokens, $11.20", row)
	}
	if row := rowOf(page, "data-day", threeDaysAgo); !strings.Contains(row, "500") || !strings.Contains(row, "$0.50") {
		t.Errorf("spend row of %s = %q, want 500 tokens, $0.50", threeDaysAgo, row)
	}
	if strings.Contains(page, "99,999") || strings.Contains(page, "$99.00") {
		t.Error("the key page counts another key's usage")
	}
	// The two charts, with 30 days of bars each and their totals.
	for chartID, total := range map[string]string{"tokens-chart": "9,000 tokens in 30 days", "cost-chart": "$11.70 in 30 days · peak $11.20"} {
		svg := regexp.MustCompile(`(?s)<svg id="` + chartID + `".*?</svg>\s*<div class="axis">.*?</div>`).FindString(page)
		if n := strings.Count(svg, "<rect "); n != chartDays || !strings.Contains(svg, total) {
			t.Errorf("%s has %d bars, want %d, and total %q:\n%s", chartID, n, chartDays, total, svg)
		}
	}
	// Its own limits, in their metric.
	if row := rowOf(page, "data-rule", KeyRuleRequestsPerMinute); !strings.Contains(row, ">30<") {
		t.Errorf("own limit %s = %q, want 30", KeyRuleRequestsPerMinute, row)
	}
	if row := rowOf(page, "data-rule", "key_cost_per_day"); !strings.Contains(row, "$2.50") {
		t.Errorf("own limit key_cost_per_day = %q, want $2.50", row)
	}
	// Every limit that applies, with its source and what is left.
	for rule, want := range map[string][]string{
		KeyRuleRequestsPerMinute: {"from override", `<span class="limitvalue">30</span>`, "29 left"},
		"key_cost_per_day":       {"from override", `<span class="limitvalue">$2.50</span>`, "$2.50 left"},
		"daily_token_budget":     {"from config", `<span class="used">20,000</span>`, "980,000 left"},
		"rate_per_minute":        {"from config", "19 left"},
	} {
		bar := limitOf(page, rule)
		for _, w := range want {
			if !strings.Contains(bar, w) {
				t.Errorf("limit %s = %q, want %q", rule, bar, w)
			}
		}
	}

	// A viewer of acme sees the key's spend in acme only, and no key of
	// another workspace.
	v := e.browser()
	v.login(e.token("viewer", "acme"))
	status, page = v.get("/ui/keys/" + id)
	if row := rowOf(page, "data-day", today); status != http.StatusOK || !strings.Contains(row, "1,200") || strings.Contains(row, "8,200") {
		t.Errorf("viewer's key page = %d, today's row %q, want acme's 1,200 tokens only", status, row)
	}
	if status, _ := v.get("/ui/keys/" + globexID); status != http.StatusForbidden {
		t.Errorf("viewer on globex's key = %d, want 403", status)
	}
	if _, list := v.get("/ui/keys"); strings.Contains(list, globexID) || !strings.Contains(list, id) {
		t.Errorf("viewer's keys page:\n%s", list)
	}
	if status, _ := v.get("/ui/keys?workspace=globex"); status != http.StatusForbidden {
		t.Errorf("viewer on globex's keys = %d, want 403", status)
	}

	// A revoked key's page says so and keeps its history; a key without
	// usage has empty charts; an unknown key is 404.
	e.must(http.StatusOK, "POST", "/admin/v1/keys/"+id+"/revoke", rootToken, nil)
	_, page = b.get("/ui/keys/" + id)
	if !strings.Contains(page, `id="revoked"`) || !strings.Contains(page, `<span class="badge off">revoked</span>`) || rowOf(page, "data-day", today) == "" {
		t.Errorf("revoked key's page:\n%s", page)
	}
	if row := rowOf(b.getOK("/ui/keys"), "data-key", id); !strings.Contains(row, "revoked") {
		t.Errorf("keys page row of the revoked key = %q", row)
	}
	page = b.getOK("/ui/keys/" + globexID)
	if !strings.Contains(page, `id="no-spend"`) || !strings.Contains(page, "0 tokens in 30 days") || !strings.Contains(page, "$0.00 in 30 days") {
		t.Errorf("page of a key without usage:\n%s", page)
	}
	if status, page := b.get("/ui/keys/nosuchkey234"); status != http.StatusNotFound || !strings.Contains(page, `id="error"`) {
		t.Errorf("unknown key = %d:\n%s", status, page)
	}
}

// getOK gets a page that must answer 200.
func (b *browser) getOK(path string) string {
	b.t.Helper()
	status, page := b.get(path)
	if status != http.StatusOK {
		b.t.Fatalf("GET %s = %d:\n%s", path, status, page)
	}
	return page
}

// TestConsole_KeyPagesNeedASession: without a console session the key
// pages send the browser to sign in, and show nothing of the key.
func TestConsole_KeyPagesNeedASession(t *testing.T) {
	e := newEnv(t)
	id, _ := e.createKey("acme", "ada")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/ui/keys", "/ui/keys/" + id} {
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+rootToken) // the API's token is no console session
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login" || strings.Contains(string(body), id) {
			t.Errorf("GET %s without a session = %d to %q, want 303 to /ui/login", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

// TestAmountText: costs in dollars, to the cent or, under a cent, to every
// digit; other metrics as numbers.
func TestAmountText(t *testing.T) {
	for _, tt := range []struct {
		metric string
		n      int64
		want   string
	}{
		{"cost", 0, "$0.00"},
		{"cost", 37, "$0.000037"},
		{"cost", 2500, "$0.0025"},
		{"cost", 10_000, "$0.01"},
		{"cost", 4_200_000, "$4.20"},
		{"tokens", 1_234_567, "1,234,567"},
		{"requests", 0, "0"},
	} {
		if got := amountText(tt.metric, tt.n); got != tt.want {
			t.Errorf("amountText(%s, %d) = %q, want %q", tt.metric, tt.n, got, tt.want)
		}
	}
}
