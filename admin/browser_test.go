package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/internal/testenv"
)

// chromium finds the browser: $SLUICE_TEST_CHROMIUM, /usr/bin/chromium or
// chromium on the PATH. Without one the browser test skips, except in CI
// (CI=true), where a missing browser is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SLUICE_TEST_CHROMIUM"), "/usr/bin/chromium"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	testenv.Missing(t, "chromium is not installed", "install chromium (or set SLUICE_TEST_CHROMIUM to a browser)")
	return ""
}

// seedConsole fills the catalog with workspaces, 30 days of usage, rules and
// an audit trail, so that the pages (and their screenshots) show something.
func seedConsole(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	for _, k := range []struct{ ws, user string }{{"acme", "ada"}, {"acme", "alan"}, {"globex", "gus"}, {"initech", "peter"}} {
		e.createKey(k.ws, k.user)
	}
	now := time.Now().UTC()
	for day := range 30 {
		at := now.AddDate(0, 0, -day)
		e.cat.RecordUsage(catalog.UsageEntry{Workspace: "acme", Route: "chat", Model: "mock-small", At: at,
			Requests: int64(40 + day*3%17), InputTokens: int64(9000 + (day*7919)%12000), OutputTokens: int64(3000 + (day*104729)%5000), CostMicros: int64(2500 + day*37)})
		e.cat.RecordUsage(catalog.UsageEntry{Workspace: "globex", Route: "messages", Model: "mock-large", At: at,
			Requests: 5, InputTokens: 2000, OutputTokens: 800, CostMicros: 9000})
	}
	// A refusal, as the gateway's Observer records it (admin.RefusedCall).
	e.cat.RecordCall(catalog.CallRecord{At: now.Add(-5 * time.Minute), RequestID: "req-acme-refused", Workspace: "acme", KeyID: "key-acme",
		Route: "chat", Model: "mock-small", Outcome: "rate_limited"})
	for i, ws := range []string{"acme", "globex", "acme"} {
		e.cat.RecordCall(catalog.CallRecord{At: now.Add(time.Duration(i-3) * time.Minute), RequestID: fmt.Sprintf("req-%s-%d", ws, i), Workspace: ws,
			KeyID: "key-" + ws, User: "u", Route: "chat", Model: "mock-small", Outcome: catalog.OutcomeReported,
			ReservedTokens: 400, InputTokens: 120, OutputTokens: int64(30 + i), CostMicros: 1500})
	}
	if err := e.cat.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.must(http.StatusCreated, "POST", "/admin/v1/budgets", rootToken, map[string]any{
		"name": "workspace_monthly_cost", "subject": "workspace", "metric": "cost", "limit": "$50", "period": "month", "warn_at": []float64{0.8}})
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "key_tpm", "kind": "rate", "subject": "key", "metric": "tokens", "limit": 100_000, "window": "1m", "mode": "shadow"})
	for range 12 {
		if err := e.admit(sluice.Identity{Workspace: "acme", User: "ada"}, 20_000); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.admit(sluice.Identity{Workspace: "globex", User: "gus"}, 700_000); err != nil {
		t.Fatal(err)
	}
}

// TestConsole_InABrowser drives Chromium: an admin signs in with a token,
// sets an override for a workspace, sees it applied and in the audit log;
// a viewer sees the workspace page read-only. With
// SLUICE_CONSOLE_SCREENSHOTS=dir it saves a PNG of each page there.
func TestConsole_InABrowser(t *testing.T) {
	exe := chromium(t)
	e := newEnv(t)
	seedConsole(t, e)
	viewer := e.token("viewer", "acme")
	shots := os.Getenv("SLUICE_CONSOLE_SCREENSHOTS")

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// text reads an element's text; a read that finds its node or its
	// page's context gone (a page still replacing the last one) is made
	// again, for a few seconds.
	text := func(sel string) string {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			if err == nil {
				return strings.TrimSpace(s)
			}
			if time.Now().After(deadline) {
				t.Fatalf("read %s: %v", sel, err)
			}
		}
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	base := e.srv.URL
	const dailyLimit = `#limits .limit[data-rule="daily_token_budget"] .limitvalue`

	// Sign in as an admin.
	run("open the console", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	shot("login")
	run("sign in", chromedp.SendKeys(chromedp.ID("token"), rootToken), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("workspaces")))
	if got := text("#role"); got != "admin" {
		t.Fatalf("signed in as %q", got)
	}
	if list := text("#workspaces"); !strings.Contains(list, "acme") || !strings.Contains(list, "globex") {
		t.Fatalf("workspaces page: %q", list)
	}
	shot("workspaces")

	// The workspace page shows the configured limit, then the override;
	// tokens and cost per day are charted side by side.
	run("open acme", chromedp.Navigate(base+"/ui/workspaces/acme"), chromedp.WaitVisible(chromedp.ID("override-form")))
	if got := text(dailyLimit); got != "1,000,000" {
		t.Fatalf("daily limit before the override = %q", got)
	}
	if bars := count("#tokens-chart rect") + count("#cost-chart rect"); bars != 2*chartDays {
		t.Fatalf("the workspace's charts have %d bars, want %d per chart", bars, chartDays)
	}
	if got := text("#cost-chart + .axis .total"); !strings.Contains(got, "in 30 days") || !strings.HasPrefix(got, "$") {
		t.Fatalf("the cost chart's total = %q, want dollars", got)
	}
	shot("workspace")
	run("set an override",
		chromedp.SetValue(chromedp.ID("rule"), "daily_token_budget"),
		chromedp.SendKeys(chromedp.ID("limit"), "300000"),
		chromedp.Click(chromedp.ID("save")),
		chromedp.WaitVisible(chromedp.ID("notice")))
	if got := text(dailyLimit); got != "300,000" {
		t.Fatalf("daily limit after the override = %q", got)
	}
	if got := text("#overrides"); !strings.Contains(got, "daily_token_budget") || !strings.Contains(got, "300,000") {
		t.Fatalf("overrides table = %q", got)
	}
	shot("workspace-override")
	// Applied on the next request: acme has used 240,000 tokens today, so
	// 70,000 more no longer fit.
	if err := e.admit(sluice.Identity{Workspace: "acme", User: "alan"}, 70_000); !errors.Is(err, sluice.ErrBudgetExhausted) {
		t.Fatalf("the next request after the override: %v, want the budget refusal", err)
	}

	// The change is in the audit log, with who made it.
	run("open the audit log", chromedp.Navigate(base+"/ui/audit"), chromedp.WaitVisible(chromedp.ID("audit")))
	audit := text("#audit tbody tr:first-child")
	if !strings.Contains(audit, "override.set") || !strings.Contains(audit, "override/daily_token_budget/workspace/acme") ||
		!strings.Contains(audit, "admin") || !strings.Contains(audit, "300000") {
		t.Fatalf("latest audit row = %q", audit)
	}
	shot("audit")
	run("open rules", chromedp.Navigate(base+"/ui/rules"), chromedp.WaitVisible(chromedp.CSS("table.rules")))
	shot("rules")
	run("open overrides", chromedp.Navigate(base+"/ui/overrides"), chromedp.WaitVisible(chromedp.ID("all-overrides")))
	shot("overrides")
	// Every settled call is listed, newest first, and filtered by key.
	run("open calls", chromedp.Navigate(base+"/ui/calls"), chromedp.WaitVisible(chromedp.ID("calls")))
	if first := text("#calls tbody tr:first-child"); !strings.Contains(first, "req-acme-2") || !strings.Contains(first, "32") || !strings.Contains(first, "$0.0015") {
		t.Fatalf("newest call row = %q", first)
	}
	if all := text("#calls tbody"); !strings.Contains(all, "req-globex-1") || !strings.Contains(all, "req-acme-refused") {
		t.Fatalf("calls = %q, want globex's and the refusal too", all)
	}
	// Refusals are counted by workspace and key beside the settled calls.
	if got := text("#outcomes-by-key"); !strings.Contains(got, "key-acme") || !strings.Contains(got, "rate_limited") {
		t.Fatalf("outcomes by key = %q, want key-acme's rate_limited", got)
	}
	if got := text("#outcomes-by-workspace"); !strings.Contains(got, "acme") || !strings.Contains(got, "rate_limited") {
		t.Fatalf("outcomes by workspace = %q", got)
	}
	shot("calls")
	run("filter calls by key", chromedp.SendKeys(chromedp.CSS(`input[name="key"]`), "key-globex"),
		chromedp.Submit(chromedp.CSS(`input[name="key"]`)), chromedp.WaitVisible(chromedp.ID("calls")))
	// The filtered page may not have replaced the one the form was on yet,
	// and a read while it does can find its node gone: read again.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		all, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#calls tbody")))
		if err == nil && strings.Contains(all, "req-globex-1") && !strings.Contains(all, "req-acme") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls of key-globex = %q", all)
		}
	}

	// A key's page, opened from the keys list: its spend per day, its own
	// limits and the live headroom of every limit that applies to it.
	made := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{"workspace": "acme", "user": "ada", "name": "ada's laptop",
		"limits": map[string]any{"requests_per_minute": 60, "budget": map[string]any{"period": "day", "dollars": "5"}}})
	keyID := made.body["key"].(map[string]any)["id"].(string)
	e.cat.RecordUsage(catalog.UsageEntry{Workspace: "acme", KeyID: keyID, User: "ada", Route: "chat", Model: "mock-small", At: time.Now().UTC(),
		Requests: 2, InputTokens: 4000, OutputTokens: 1000, CostMicros: 1_250_000})
	if err := e.cat.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.admit(sluice.Identity{Org: sluice.DefaultOrg, Workspace: "acme", User: "ada", Key: keyID}, 1000); err != nil {
		t.Fatal(err)
	}
	run("open the keys", chromedp.Navigate(base+"/ui/keys"), chromedp.WaitVisible(chromedp.ID("keys")))
	shot("keys")
	run("open the key from the list", chromedp.Click(chromedp.CSS(`#keys tr[data-key="`+keyID+`"] a.key`)), chromedp.WaitVisible(chromedp.ID("spend")))
	if got := text("#key-name"); got != "ada's laptop" {
		t.Fatalf("key page of %q", got)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	if row := text("#spend tbody tr:first-child"); !strings.Contains(row, today) || !strings.Contains(row, "4,000") || !strings.Contains(row, "$1.25") {
		t.Fatalf("today's spend = %q, want 4,000 input tokens and $1.25", row)
	}
	if own := text("#own-limits"); !strings.Contains(own, KeyRuleRequestsPerMinute) || !strings.Contains(own, "key_cost_per_day") || !strings.Contains(own, "$5.00") {
		t.Fatalf("the key's own limits = %q", own)
	}
	keyRate := `#limits .limit[data-rule="` + KeyRuleRequestsPerMinute + `"]`
	if limit, figures := text(keyRate+" .limitvalue"), text(keyRate+" .figures"); limit != "60" || !strings.Contains(figures, "59 left") {
		t.Fatalf("the key's rate = %q, %q, want 60 with 59 left", limit, figures)
	}
	if figures := text(`#limits .limit[data-rule="daily_token_budget"] .figures`); !strings.Contains(figures, "left") {
		t.Fatalf("the workspace budget on the key's page = %q", figures)
	}
	if bars := count("#cost-chart rect"); bars != chartDays {
		t.Fatalf("the key's cost chart has %d bars, want %d", bars, chartDays)
	}
	if got := text("#cost-chart + .axis .total"); !strings.HasPrefix(got, "$1.25 in 30 days") {
		t.Fatalf("the key's cost chart total = %q", got)
	}
	shot("key")

	// A viewer sees the same page read-only.
	run("sign out", chromedp.Click(chromedp.CSS(".who button")), chromedp.WaitVisible(chromedp.ID("token")))
	run("sign in as a viewer", chromedp.SendKeys(chromedp.ID("token"), viewer), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("workspaces")))
	if got := text("#role"); got != "viewer" {
		t.Fatalf("signed in as %q", got)
	}
	if list := text("#workspaces"); strings.Contains(list, "globex") {
		t.Fatalf("the viewer sees another workspace: %q", list)
	}
	run("open acme as a viewer", chromedp.Navigate(base+"/ui/workspaces/acme"), chromedp.WaitVisible(chromedp.ID("readonly")))
	forms, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#override-form, #limit, #save")).map(n => n.id)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(forms) != 0 {
		t.Fatalf("the viewer's page has %v", forms)
	}
	if got := text(dailyLimit); got != "300,000" {
		t.Fatalf("viewer sees daily limit %q", got)
	}
	shot("workspace-viewer")
	run("viewer's calls", chromedp.Navigate(base+"/ui/calls"), chromedp.WaitVisible(chromedp.ID("calls")))
	if all := text("#calls tbody"); !strings.Contains(all, "req-acme-0") || strings.Contains(all, "globex") {
		t.Fatalf("the viewer's calls = %q, want acme's only", all)
	}
	run("viewer on another workspace", chromedp.Navigate(base+"/ui/workspaces/globex"), chromedp.WaitVisible(chromedp.ID("error")))
	if status := text("#error"); !strings.Contains(status, "may not read workspace") {
		t.Fatalf("viewer on globex: %q", status)
	}
}
