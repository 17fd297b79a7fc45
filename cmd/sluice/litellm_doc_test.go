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
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
	"go.yaml.in/yaml/v3"
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

// TestLiteLLMDoc_ExamplesWork parses the yaml blocks of
// docs/migrating-from-litellm.md together, as one config (each top-level
// list the sum of the blocks'), and sends every "json METHOD PATH" block,
// in order, to an admin API whose policy holds the doc's rules and which
// checks keys' tiers and models against that config, as serve does: each
// must succeed. {id} is the ID of the first key made. Then every sluice
// command line the doc quotes must name a real command and flags, and its
// keys create line runs as written against that admin API.
func TestLiteLLMDoc_ExamplesWork(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "migrating-from-litellm.md")
	blocks := docBlocks(t, path)
	merged := map[string][]any{}
	var yamlBlocks, calls int
	for _, b := range blocks {
		if b.info != "yaml" {
			continue
		}
		yamlBlocks++
		if _, err := config.Parse([]byte(b.text), nil); err != nil {
			t.Fatalf("yaml block does not parse:\n%s\n%v", b.text, err)
		}
		var top map[string][]any
		if err := yaml.Unmarshal([]byte(b.text), &top); err != nil {
			t.Fatalf("yaml block is not a map of lists:\n%s\n%v", b.text, err)
		}
		for k, list := range top {
			merged[k] = append(merged[k], list...)
		}
	}
	whole, err := yaml.Marshal(merged)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(whole, nil)
	if err != nil {
		t.Fatalf("the doc's yaml blocks together do not parse:\n%s\n%v", whole, err)
	}
	var rules []sluice.Rule
	for i := range cfg.Rules {
		rules = append(rules, cfg.Rules[i].SluiceRule())
	}
	for i := range cfg.Models {
		if m := &cfg.Models[i]; m.Price == nil {
			t.Errorf("model %s of the doc has no price (from the file or the list)", m.Name)
		}
	}
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	layers := []config.Layer{{Source: config.SourceDefault, Rules: config.DefaultRules()}, {Source: config.SourceConfig, Rules: rules}}
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: config.Resolve(layers...)})
	if err != nil {
		t.Fatal(err)
	}
	const token = "litellm-doc-token"
	h, err := admin.New(admin.Options{Catalog: cat, Limiter: l, AdminToken: token, CheckKey: cfg.CheckKey, OnChange: func() {
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
	checkDocCommands(t, path, srv.URL, token)
}

// docCommand is a sluice command line quoted in a doc, in backquotes (it
// may wrap).
var docCommand = regexp.MustCompile("`sluice ([^`]+)`")

// checkDocCommands checks every sluice command line of the doc at path:
// each, with --help added, is answered by run with exit 0, which it is
// only when its command exists and every flag it gives is one of the
// command's (with a valid value). A keys create line with its flags, its
// admin URL replaced with adminURL, is run as written and must make the
// key.
func checkDocCommands(t *testing.T, path, adminURL, token string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_ADMIN_TOKEN", token)
	lines := docCommand.FindAllStringSubmatch(string(b), -1)
	created := false
	for _, m := range lines {
		args := strings.Fields(m[1])
		if code := run(append(slices.Clone(args), "--help")); code != 0 {
			t.Errorf("sluice %s: exit %d with --help: a command or flag the CLI does not have", m[1], code)
		}
		if len(args) > 1 && args[0] == "keys" && args[1] == "create" && slices.Contains(args, "--admin-url") {
			for i, a := range args {
				if strings.HasPrefix(a, "http://127.0.0.1:8081") {
					args[i] = adminURL
				}
			}
			var out bytes.Buffer
			if err := keysTo(&out, args[1:]); err != nil {
				t.Errorf("sluice %s: %v\n%s", m[1], err, out.String())
			}
			created = true
		}
	}
	if len(lines) < 3 || !created {
		t.Fatalf("found %d sluice command lines (keys create among them: %v); the test found too few to check", len(lines), created)
	}
}
