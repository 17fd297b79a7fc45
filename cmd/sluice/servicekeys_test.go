package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
)

// TestKeys_ServiceKeys creates service keys with the CLI, on the data
// directory and through the admin API, lists them, and refuses a bad
// permission with the catalog's message.
func TestKeys_ServiceKeys(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	data := t.TempDir()
	srv, cat, _ := newAdminServer(t)
	env := append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_CONFIG=", "SLUICE_DATABASE=", "SLUICE_ENV=",
		"SLUICE_ADMIN_TOKEN="+adminServerToken)
	run := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, where := range []struct {
		name  string
		flags []string
	}{
		{"data directory", nil},
		{"admin API", []string{"--admin-url", srv.URL}},
	} {
		t.Run(where.name, func(t *testing.T) {
			create := append([]string{"keys", "create"}, where.flags...)
			out, err := run(append(create, "--workspace", "app", "--user", "server",
				"--assert", "workspace,user,team", "--assert-workspaces", "ws-a,team-*")...)
			if err != nil {
				t.Fatalf("keys create: %v\n%s", err, out)
			}
			if lines := strings.Split(strings.TrimSpace(out), "\n"); !strings.HasPrefix(lines[len(lines)-1], "sk-sluice-") {
				t.Fatalf("keys create printed no key:\n%s", out)
			}
			for _, bad := range []struct {
				flags []string
				says  string
			}{
				{[]string{"--assert", "workspace,org"}, "unknown attribute"},
				{[]string{"--assert", "user", "--assert-workspaces", "ws-a"}, "assert_workspaces needs workspace in assert"},
			} {
				args := append(append(append([]string{}, create...), "--workspace", "app", "--user", "server"), bad.flags...)
				if out, err := run(args...); err == nil || !strings.Contains(out, bad.says) {
					t.Errorf("keys create %v: %v\n%s\nwant a refusal saying %q", bad.flags, err, out, bad.says)
				}
			}
			out, err = run(append([]string{"keys", "list"}, where.flags...)...)
			if err != nil {
				t.Fatalf("keys list: %v\n%s", err, out)
			}
			if !strings.Contains(out, "ASSERTS") || !strings.Contains(out, "workspace,user,team in ws-a,team-*") || strings.Count(out, "\n") != 2 {
				t.Errorf("keys list does not show the one service key's permission:\n%s", out)
			}
		})
	}
	// The admin API's key went to the admin server's catalog.
	keys, err := cat.ListKeys(context.Background(), "app")
	if err != nil || len(keys) != 1 || !slices.Equal(keys[0].Assert, []string{"workspace", "user", "team"}) {
		t.Fatalf("admin API keys = %+v, %v", keys, err)
	}
}

// TestKeyStore_CarriesTheAssertPermission checks that the gateway's
// principal has the key's permission to assert.
func TestKeyStore_CarriesTheAssertPermission(t *testing.T) {
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	ctx := context.Background()
	service, _, err := cat.CreateKey(ctx, catalog.Key{Org: "acme", Workspace: "app", User: "server",
		Assert: []string{"user", "workspace"}, AssertWorkspaces: []string{"ws-*"}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := cat.CreateKey(ctx, catalog.Key{Workspace: "w", User: "u"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	k := newKeyStore(cat, config.Default())
	p, err := k.Authenticate(ctx, service)
	if err != nil {
		t.Fatal(err)
	}
	if p.Org != "acme" || !slices.Equal(p.Assert, []string{"workspace", "user"}) || !slices.Equal(p.AssertWorkspaces, []string{"ws-*"}) {
		t.Errorf("service key's principal = %+v", p)
	}
	if p, err := k.Authenticate(ctx, plain); err != nil || p.Assert != nil || p.AssertWorkspaces != nil {
		t.Errorf("plain key's principal = %+v, %v", p, err)
	}
}
