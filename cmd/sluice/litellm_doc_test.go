package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
)

// docBlock is a fenced block of a doc: its info string ("yaml", "json
// POST /admin/v1/keys") and text.
type docBlock struct{ info, text string }

var fence = regexp.MustCompile("(?ms)^```([^\\n]*)\\n(.*?)^```")

func docBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	for _, m := range fence.FindAllStringSubmatch(string(b), -1) {
		out = append(out, docBlock{info: strings.TrimSpace(m[1]), text: m[2]})
	}
	return out
}

// TestLiteLLMDoc_ExamplesWork parses every yaml block of
// docs/migrating-from-litellm.md as a config, and sends every "json METHOD
// PATH" block, in order, to an admin API whose policy holds the doc's
// rules: each must succeed. {id} is the ID of the first key made.
func TestLiteLLMDoc_ExamplesWork(t *testing.T) {
	blocks := docBlocks(t, filepath.Join("..", "..", "docs", "migrating-from-litellm.md"))
	var rules []sluice.Rule
	var yamlBlocks, calls int
	for _, b := range blocks {
		if b.info != "yaml" {
			continue
		}
		yamlBlocks++
		cfg, err := config.Parse([]byte(b.text), nil)
		if err != nil {
			t.Fatalf("yaml block does not parse:\n%s\n%v", b.text, err)
		}
		for i := range cfg.Rules {
			rules = append(rules, cfg.Rules[i].SluiceRule())
		}
		for i := range cfg.Models {
			if m := &cfg.Models[i]; m.Price == nil {
				t.Errorf("model %s of the doc has no price (from the file or the list)", m.Name)
			}
		}
	}
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	layers := []sluice.Layer{{Source: config.SourceDefault, Rules: config.DefaultRules()}, {Source: config.SourceConfig, Rules: rules}}
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: sluice.Resolve(layers...)})
	if err != nil {
		t.Fatal(err)
	}
	const token = "litellm-doc-token"
	h, err := admin.New(admin.Options{Catalog: cat, Limiter: l, AdminToken: token, OnChange: func() {
		p, _, err := admin.LoadPolicy(context.Background(), cat, layers, nil)
		if err == nil {
			err = l.SetPolicy(p)
		}
		if err != nil {
			t.Errorf("reload policy: %v", err)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	firstKey := ""
	for _, b := range blocks {
		method, path, ok := strings.Cut(strings.TrimPrefix(b.info, "json "), " ")
		if !strings.HasPrefix(b.info, "json ") || !ok {
			continue
		}
		calls++
		path = strings.ReplaceAll(path, "{id}", firstKey)
		req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader([]byte(b.text)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s = %d %s\nbody sent:\n%s", method, path, resp.StatusCode, body, b.text)
		}
		var answer struct {
			Key struct {
				ID string `json:"id"`
			} `json:"key"`
		}
		if json.Unmarshal(body, &answer) == nil && firstKey == "" && answer.Key.ID != "" {
			firstKey = answer.Key.ID
		}
	}
	if yamlBlocks < 5 || calls < 5 {
		t.Fatalf("the doc has %d yaml blocks and %d API calls; the test found too few to check", yamlBlocks, calls)
	}
	// The first key's limits are in force: its own rate and budget apply.
	eff, err := l.Effective(context.Background(), sluice.Identity{Org: "default", Workspace: "ml", User: "ada", Team: "ml", Key: firstKey})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, e := range eff {
		got[e.Rule] = e.Limit
	}
	if got["key_requests_per_minute"] != 60 || got["key_cost_per_month"] != 25_000_000 || got["key_in_flight"] != 4 || got["team_monthly_cost"] != 2_000_000_000 {
		t.Fatalf("the first key's effective limits = %v", got)
	}
}
