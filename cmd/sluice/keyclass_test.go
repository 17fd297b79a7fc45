package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestKeys_ClassAndMaxWaitFlags checks that "sluice keys create" and
// "sluice keys update" take --class and --max-wait, on the data directory
// and through a running server's admin API, change only the fields given,
// and refuse a --max-wait that is no duration and an update that changes
// nothing.
func TestKeys_ClassAndMaxWaitFlags(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(keysTestConfig+"data_dir: "+filepath.Join(dir, "data")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	remoteCat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remoteCat.Close() })
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Options{Catalog: remoteCat, Limiter: l, AdminToken: "keys-test-token", CheckKey: checkKeyLive(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv("SLUICE_ADMIN_TOKEN", "keys-test-token")

	// The one key of a side's catalog.
	theKey := func(where string) catalog.Key {
		t.Helper()
		cat := remoteCat
		if where == "local" {
			local, err := openCatalog(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer local.Close()
			cat = local
		}
		list, err := cat.ListKeys(context.Background(), "w-"+where)
		if err != nil || len(list) != 1 {
			t.Fatalf("%s keys: %+v, %v", where, list, err)
		}
		return list[0]
	}
	for _, where := range []string{"local", "remote"} {
		t.Run(where, func(t *testing.T) {
			run := func(args ...string) error {
				args = append(args, "--config", cfgPath)
				if where == "remote" {
					args = append(args, "--admin-url", srv.URL)
				}
				return keys(args)
			}
			if err := run("create", "--workspace", "w-"+where, "--user", "u", "--tier", "pro", "--name", "batcher", "--class", "batch", "--max-wait", "200ms"); err != nil {
				t.Fatal(err)
			}
			k := theKey(where)
			if k.Class != "batch" || time.Duration(k.MaxWait) != 200*time.Millisecond || k.Tier != "pro" {
				t.Fatalf("created key %+v", k)
			}
			if err := run("update", k.ID, "--class", "interactive"); err != nil {
				t.Fatal(err)
			}
			if k = theKey(where); k.Class != "interactive" || time.Duration(k.MaxWait) != 200*time.Millisecond || k.Name != "batcher" || k.Tier != "pro" {
				t.Fatalf("key after update --class: %+v", k)
			}
			if err := run("update", "--max-wait", "1m30s", k.ID, "--name", "renamed"); err != nil {
				t.Fatal(err)
			}
			if k = theKey(where); k.Class != "interactive" || time.Duration(k.MaxWait) != 90*time.Second || k.Name != "renamed" {
				t.Fatalf("key after update --max-wait --name: %+v", k)
			}
			if err := run("update", k.ID, "--class", "", "--max-wait", "0"); err != nil {
				t.Fatal(err)
			}
			if k = theKey(where); k.Class != "" || k.MaxWait != 0 {
				t.Fatalf("key after update back to the tier's: %+v", k)
			}
			for _, bad := range []struct {
				args []string
				says string
			}{
				{[]string{"create", "--workspace", "w-" + where, "--user", "v", "--max-wait", "soon"}, `want a duration such as 2s or 500ms, got "soon"`},
				{[]string{"update", k.ID, "--max-wait", "-1s"}, "want a duration"},
				{[]string{"update", k.ID, "--class", "a b"}, `class "a b" must not contain spaces`},
				{[]string{"update", k.ID, "--tier", "gold"}, `unknown tier "gold"`},
				{[]string{"update", k.ID}, "give what to change"},
				{[]string{"update", "--class", "batch"}, "want the key id"},
			} {
				if err := run(bad.args...); err == nil || !strings.Contains(err.Error(), bad.says) {
					t.Errorf("keys %v = %v, want an error saying %q", bad.args, err, bad.says)
				}
			}
			if k = theKey(where); k.Class != "" || k.Tier != "pro" {
				t.Fatalf("key after the refused updates: %+v", k)
			}
		})
	}
}

// TestPrintKeys_ShowsClassAndMaxWait checks the last columns of "sluice
// keys list".
func TestPrintKeys_ShowsClassAndMaxWait(t *testing.T) {
	var out strings.Builder
	printKeys(&out, []catalog.Key{
		{ID: "aaaaaaaaaaaa", Org: "default", Workspace: "w", User: "u", Class: "batch", MaxWait: sluice.Duration(1500 * time.Millisecond)},
		{ID: "bbbbbbbbbbbb", Org: "default", Workspace: "w", User: "v"},
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, want := range [][2]string{{"CLASS", "MAX_WAIT"}, {"batch", "1.5s"}, {"-", "-"}} {
		f := strings.Fields(lines[i])
		if got := [2]string{f[len(f)-2], f[len(f)-1]}; got != want {
			t.Errorf("line %d ends with %q, want %q:\n%s", i, got, want, out.String())
		}
	}
}
