package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/catalog"
)

// postRule creates a rule through the admin API at base.
func postRule(t *testing.T, base string, rule map[string]any) {
	t.Helper()
	body, _ := json.Marshal(rule)
	req, _ := http.NewRequest(http.MethodPost, base+"/admin/v1/rules", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer cli-test-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		var msg bytes.Buffer
		msg.ReadFrom(resp.Body)
		t.Fatalf("create rule %v: %s %s", rule["name"], resp.Status, msg.String())
	}
}

// TestCLI_LimitsEveryKindAndMetric sets and shows an override of a rule
// of every kind and metric, on a workspace and on a key, through the CLI
// against the admin API: a cost rule's in dollars, as the API takes them.
func TestCLI_LimitsEveryKindAndMetric(t *testing.T) {
	srv, cat, _ := adminServer(t)
	_, created, err := cat.CreateKey(context.Background(), catalog.Key{Workspace: "acme", User: "ada"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	url := "--admin-url=" + srv.URL
	type rule struct {
		kind, metric, limit, set, shows string
	}
	rules := []rule{
		{"rate", "requests", "100", "1,000", "1,000"},
		{"rate", "input_tokens", "100", "2000", "2,000"},
		{"rate", "output_tokens", "100", "3000", "3,000"},
		{"rate", "tokens", "100", "4000", "4,000"},
		{"rate", "cost", "$1", "12.50", "$12.5"},
		{"budget", "requests", "100", "5000", "5,000"},
		{"budget", "input_tokens", "100", "6000", "6,000"},
		{"budget", "output_tokens", "100", "7000", "7,000"},
		{"budget", "tokens", "100", "8000", "8,000"},
		{"budget", "cost", "$25", "$12.50", "$12.5"},
		{"budget", "audio_seconds", "100", "9000", "9,000"},
		{"concurrency", "concurrency", "4", "9", "9"},
	}
	for _, subject := range []string{"workspace", "key"} {
		for _, r := range rules {
			name := subject + "_" + r.kind + "_" + r.metric
			def := map[string]any{"name": name, "kind": r.kind, "subject": subject, "metric": r.metric}
			if r.metric == "cost" {
				def["limit"] = r.limit
			} else {
				def["limit"] = json.Number(r.limit)
			}
			switch r.kind {
			case "rate":
				def["window"] = "1m"
			case "budget":
				def["period"] = "month"
			}
			postRule(t, srv.URL, def)
		}
	}
	for _, subject := range []struct{ flag, value string }{{"--workspace", "acme"}, {"--key", created.ID}} {
		// Before any override: a dollar budget shows in dollars.
		out, err := runCLI(t, "limits", "show", url, subject.flag, subject.value)
		if err != nil {
			t.Fatalf("limits show %s: %v", subject.flag, err)
		}
		attr := strings.TrimPrefix(subject.flag, "--")
		if !strings.Contains(strings.Join(strings.Fields(out), " "), attr+"_budget_cost budget "+attr+" cost month $25 $0") {
			t.Errorf("limits show %s before overrides lacks the $25 budget:\n%s", subject.flag, out)
		}
		for _, r := range rules {
			name := attr + "_" + r.kind + "_" + r.metric
			out, err := runCLI(t, "limits", "set", url, subject.flag, subject.value, "--rule", name, "--limit", r.set)
			if err != nil {
				t.Fatalf("limits set %s %s %s: %v", subject.flag, name, r.set, err)
			}
			if !strings.Contains(out, "limit "+r.shows+",") {
				t.Errorf("limits set %s: %q, want limit %s", name, out, r.shows)
			}
		}
		out, err = runCLI(t, "limits", "show", url, subject.flag, subject.value)
		if err != nil {
			t.Fatalf("limits show %s: %v", subject.flag, err)
		}
		squeezed := strings.Join(strings.Fields(out), " ")
		for _, r := range rules {
			name := attr + "_" + r.kind + "_" + r.metric
			if !strings.Contains(squeezed, name+" "+r.kind+" "+attr+" "+r.metric) || !strings.Contains(squeezed, " "+r.shows+" ") {
				t.Errorf("limits show %s lacks %s at %s:\n%s", subject.flag, name, r.shows, out)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"limits", "show", url}, "limits show names a subject"},
		{[]string{"limits", "set", url, "--workspace", "acme", "--rule", "workspace_budget_cost", "--limit", "twelve"}, "want dollars"},
		{[]string{"limits", "set", url, "--workspace", "acme", "--rule", "workspace_budget_cost", "--limit", "-$5"}, "must not be negative"},
		{[]string{"limits", "set", url, "--workspace", "acme", "--rule", "workspace_budget_tokens", "--limit", "12.50"}, "want a whole number"},
	} {
		if _, err := runCLI(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.says)
		}
	}
}
