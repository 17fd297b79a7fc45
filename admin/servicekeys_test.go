package admin

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestAPI_ServiceKeys(t *testing.T) {
	e := newEnv(t)
	created := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"workspace": "app", "user": "server", "assert": []string{"user", "workspace"}, "assert_workspaces": []string{"ws-a", "team-*"},
	})
	secret := created.body["secret"].(string)
	key := created.body["key"].(map[string]any)
	k, err := e.cat.Authenticate(context.Background(), secret)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.Assert, []string{"workspace", "user"}) || !slices.Equal(k.AssertWorkspaces, []string{"ws-a", "team-*"}) {
		t.Fatalf("stored key = %+v", k)
	}
	plain := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{"workspace": "app", "user": "ada"})
	for _, tc := range []struct {
		path, want string
	}{
		{"/admin/v1/keys?workspace=app", `"assert":["workspace","user"],"assert_workspaces":["ws-a","team-*"]`},
		{"/admin/v1/keys/" + key["id"].(string), `"assert":["workspace","user"],"assert_workspaces":["ws-a","team-*"]`},
	} {
		r := e.must(http.StatusOK, "GET", tc.path, rootToken, nil)
		if !strings.Contains(strings.Join(strings.Fields(r.raw), ""), tc.want) {
			t.Errorf("GET %s = %s, want %s", tc.path, r.raw, tc.want)
		}
	}
	// A plain key shows no permission at all.
	r := e.must(http.StatusOK, "GET", "/admin/v1/keys/"+plain.body["key"].(map[string]any)["id"].(string), rootToken, nil)
	if strings.Contains(r.raw, "assert") {
		t.Errorf("plain key = %s", r.raw)
	}
	for _, tc := range []struct {
		name string
		body string
		says string
	}{
		{"unknown attribute", `{"workspace":"app","user":"u","assert":["workspace","org"]}`, `unknown attribute "org"`},
		{"workspaces without workspace", `{"workspace":"app","user":"u","assert":["user"],"assert_workspaces":["ws-a"]}`, "assert_workspaces needs workspace in assert"},
		{"star inside a pattern", `{"workspace":"app","user":"u","assert":["workspace"],"assert_workspaces":["a*b"]}`, "may only end a prefix"},
		{"assert as a string", `{"workspace":"app","user":"u","assert":"user"}`, `field "assert"`},
	} {
		r := e.do("POST", "/admin/v1/keys", rootToken, tc.body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.errorMessage(), tc.says) {
			t.Errorf("%s: %d %s, want 400 saying %q", tc.name, r.status, r.raw, tc.says)
		}
	}
}
