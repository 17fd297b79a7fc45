package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestServe_TenantsShareNothing runs the three reports against the
// built binary: keys of two orgs with the same workspace and user names, a
// rule stored through the admin API for one org, and the default daily
// budget. Each org spends its own counters; the org's rule refuses in its
// org only.
func TestServe_TenantsShareNothing(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	data := t.TempDir()
	const token = "tenancy-test-admin-token-0123456789"
	env := append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_LISTEN="+anyPort, "SLUICE_ADMIN_LISTEN="+anyPort,
		"SLUICE_CONFIG=", "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_ENV=", "SLUICE_ADMIN_TOKEN="+token)
	keys := map[string]string{}
	for _, org := range []string{"orgA", "orgB"} {
		keys[org] = createKey(t, bin, env, "--org", org, "--workspace", "shared", "--user", "dup")
	}
	serve := startServe(t, serveCmd(bin, env))
	listen, admin := serve.listen, serve.admin

	adminDo := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+admin+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, out := adminDo("POST", "/admin/v1/rules", `{"name":"user_rpm","kind":"rate","subject":"user","limit":2,"window":"1m"}`); code != 201 {
		t.Fatalf("deployment rule: %d %v", code, out)
	}
	if code, out := adminDo("POST", "/admin/v1/rules", `{"name":"org_a_user_rpm","org":"orgA","kind":"rate","subject":"user","limit":1,"window":"1m"}`); code != 201 {
		t.Fatalf("orgA's rule: %d %v", code, out)
	}
	call := func(org string, tokens int) int {
		t.Helper()
		body := fmt.Sprintf(`{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"hi [mock tokens=%d]"}]}`, tokens)
		req, _ := http.NewRequest("POST", "http://"+listen+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keys[org])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var got []int
	for _, org := range []string{"orgA", "orgA", "orgB", "orgB", "orgB"} {
		got = append(got, call(org, 5))
	}
	if want := []int{200, 429, 200, 200, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v: orgA's rule refuses orgA only, and each org's user dup has its own counter", got, want)
	}
	used := func(org string) float64 {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			code, out := adminDo("GET", "/admin/v1/effective?org="+org+"&workspace=shared", "")
			if code != 200 {
				t.Fatalf("effective for %s: %d %v", org, code, out)
			}
			for _, l := range out["limits"].([]any) {
				if m := l.(map[string]any); m["rule"] == "daily_token_budget" {
					if u := m["used"].(float64); u > 0 || time.Now().After(deadline) {
						return u
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a, b := used("orgA"), used("orgB")
	if a <= 0 || b <= 0 || b < 2*a-4 || b > 2*a+4 {
		t.Fatalf("daily_token_budget used: orgA %v, orgB %v; want each org's own (orgB made twice orgA's calls)", a, b)
	}
}
