package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
)

// npmClients returns the directory of the real npm clients
// (testdata/npmclients, installed by .ci/run with npm ci). Not installed,
// the test skips, unless CI=true, where that fails it.
func npmClients(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs("testdata/npmclients")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ai")); err != nil {
		testenv.Missing(t, fmt.Sprintf("the npm clients are not installed (%v)", err), "run npm ci --prefix gateway/testdata/npmclients")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node: %v", err)
	}
	return dir
}

type clientResult struct {
	Client string `json:"client"`
	OK     bool   `json:"ok"`
	Status int    `json:"status"`
	Error  string `json:"error"`
	MS     int64  `json:"ms"`
}

// runClients calls the gateway once with each npm client, as it retries out
// of the box.
func runClients(t *testing.T, dir, base, model string) []clientResult {
	t.Helper()
	cmd := exec.Command("node", "clients.mjs", base, testKey, model)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node clients.mjs: %v\n%s", err, out)
	}
	var res []clientResult
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var r clientResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("client output %q: %v", sc.Text(), err)
		}
		res = append(res, r)
	}
	if len(res) != 5 {
		t.Fatalf("%d client results, want 5:\n%s", len(res), out)
	}
	return res
}

// The refusal contract with the real clients, on the default config: each
// of the OpenAI and Anthropic Node SDKs and the Vercel AI SDK's OpenAI,
// Anthropic and OpenAI-compatible providers tries a budget refusal exactly
// once, and retries a rate limit after its hint and succeeds.
func TestGateway_NPMClientsObeyTheRefusalContract(t *testing.T) {
	t.Parallel()
	dir := npmClients(t)
	t.Run("budget tried once", func(t *testing.T) {
		h := newHarness(t, []sluice.Rule{oneCallADay})
		if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil); r.status != 200 {
			t.Fatalf("spending the budget: %d", r.status)
		}
		for _, r := range runClients(t, dir, h.url, "mock-small") {
			if r.OK || r.Status != 429 && r.Status != 402 {
				t.Errorf("%s: %+v, want a budget refusal", r.Client, r)
			}
		}
		refused := 0
		for _, ev := range h.rec.waitEvents(t, 6) {
			if ev.Outcome == "budget_exceeded" {
				refused++
			}
		}
		time.Sleep(200 * time.Millisecond) // any retry would have arrived by now
		if all := len(h.rec.waitEvents(t, 6)); refused != 5 || all != 6 {
			t.Fatalf("%d budget refusals in %d requests, want 5 in 6: a client retried a budget refusal", refused, all)
		}
	})
	t.Run("rate limit retried after the hint", func(t *testing.T) {
		// One call per 2 s for the workspace: each client finds the bucket
		// spent by the one before, is told to retry in about 2 s, and does.
		rate := sluice.Rule{Name: "one_per_2s", Kind: sluice.KindRate, Subject: "workspace", Limit: 1, Window: 2 * time.Second}
		h := newHarness(t, []sluice.Rule{rate})
		if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil); r.status != 200 {
			t.Fatalf("spending the bucket: %d", r.status)
		}
		for _, r := range runClients(t, dir, h.url, "mock-small") {
			if !r.OK {
				t.Errorf("%s: %+v, want it to retry after the hint and succeed", r.Client, r)
			}
		}
	})
}
