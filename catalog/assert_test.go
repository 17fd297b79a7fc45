package catalog

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCatalog_ServiceKeyRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for _, tc := range []struct {
			name                           string
			assert, workspaces             []string
			wantAssert, wantWorkspaces     []string
			mayWorkspace, mayUser, mayTeam bool
		}{
			{name: "plain key"},
			{name: "every attribute, any workspace", assert: []string{"team", "user", "workspace"},
				wantAssert: []string{"workspace", "user", "team"}, mayWorkspace: true, mayUser: true, mayTeam: true},
			{name: "user only", assert: []string{"user", " user"}, wantAssert: []string{"user"}, mayUser: true},
			{name: "listed workspaces", assert: []string{"workspace", "user"}, workspaces: []string{"ws-a", " team-*", "ws-a"},
				wantAssert: []string{"workspace", "user"}, wantWorkspaces: []string{"ws-a", "team-*"}, mayWorkspace: true, mayUser: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				secret, k, err := c.CreateKey(ctx, Key{Workspace: "app", User: "server", Assert: tc.assert, AssertWorkspaces: tc.workspaces}, "admin")
				if err != nil {
					t.Fatal(err)
				}
				check := func(how string, got Key) {
					t.Helper()
					if !slices.Equal(got.Assert, tc.wantAssert) || !slices.Equal(got.AssertWorkspaces, tc.wantWorkspaces) {
						t.Errorf("%s: assert %q, workspaces %q; want %q, %q", how, got.Assert, got.AssertWorkspaces, tc.wantAssert, tc.wantWorkspaces)
					}
					if got.MayAssert(AssertWorkspace) != tc.mayWorkspace || got.MayAssert(AssertUser) != tc.mayUser || got.MayAssert(AssertTeam) != tc.mayTeam {
						t.Errorf("%s: MayAssert disagrees with %q", how, got.Assert)
					}
				}
				check("CreateKey", k)
				got, err := c.Authenticate(ctx, secret)
				if err != nil {
					t.Fatal(err)
				}
				check("Authenticate", got)
				// The cached answer is the caller's own copy.
				if len(got.Assert) > 0 {
					got.Assert[0] = "changed"
					again, err := c.Authenticate(ctx, secret)
					if err != nil {
						t.Fatal(err)
					}
					check("Authenticate again", again)
				}
				fresh, err := c.GetKey(ctx, k.ID)
				if err != nil {
					t.Fatal(err)
				}
				check("GetKey", fresh)
				list, err := c.ListKeys(ctx, "app")
				if err != nil {
					t.Fatal(err)
				}
				i := slices.IndexFunc(list, func(l Key) bool { return l.ID == k.ID })
				if i < 0 {
					t.Fatalf("ListKeys lacks %s", k.ID)
				}
				check("ListKeys", list[i])
			})
		}
	})
}

func TestCatalog_ServiceKeyValidates(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for _, tc := range []struct {
			name               string
			assert, workspaces []string
			want               string
		}{
			{"unknown attribute", []string{"workspace", "org"}, nil, `unknown attribute "org"`},
			{"tier is not assertable", []string{"tier"}, nil, `unknown attribute "tier"`},
			{"empty attribute", []string{""}, nil, `unknown attribute ""`},
			{"workspaces without workspace", []string{"user"}, []string{"ws-a"}, "assert_workspaces needs workspace in assert"},
			{"workspaces without any permission", nil, []string{"ws-a"}, "assert_workspaces needs workspace in assert"},
			{"empty pattern", []string{"workspace"}, []string{"ws-a", " "}, "empty workspace pattern"},
			{"star inside", []string{"workspace"}, []string{"a*b"}, "* may only end a prefix"},
			{"two stars", []string{"workspace"}, []string{"a**"}, "* may only end a prefix"},
			{"control character", []string{"workspace"}, []string{"ws\x00a"}, "control characters"},
			{"too long", []string{"workspace"}, []string{strings.Repeat("w", 257)}, "longer than 256 bytes"},
		} {
			_, _, err := c.CreateKey(ctx, Key{Workspace: "app", User: "server", Assert: tc.assert, AssertWorkspaces: tc.workspaces}, "admin")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want ErrInvalid saying %q", tc.name, err, tc.want)
			}
		}
		keys, err := c.ListKeys(ctx, "")
		if err != nil || len(keys) != 0 {
			t.Fatalf("refused keys were stored: %v, %v", keys, err)
		}
	})
}
