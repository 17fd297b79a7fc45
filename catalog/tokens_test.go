package catalog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCatalog_AdminTokens(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		secret, tok, err := c.CreateAdminToken(ctx, AdminToken{Name: "grafana", Role: RoleViewer, Workspaces: []string{"b", "a", "a"},
			ExpiresAt: clock.Now().Add(time.Hour)}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, adminSecretPrefix) || strings.Join(tok.Workspaces, ",") != "a,b" || tok.CreatedBy != "admin" {
			t.Fatalf("token = %+v, secret %q", tok, secret)
		}
		got, err := c.AuthenticateAdminToken(ctx, secret)
		if err != nil || got.ID != tok.ID || got.Role != RoleViewer {
			t.Fatalf("authenticate = %+v, %v", got, err)
		}
		// The secret is in neither the database file nor the audit log.
		for name, b := range be.stored(t, c) {
			if strings.Contains(string(b), secret[len(secret)-secretRandLen:]) {
				t.Fatalf("%s holds the secret", name)
			}
		}
		// The secret with its last character changed (to one it is not:
		// a random secret ends in "0" one time in 62).
		last := "0"
		if strings.HasSuffix(secret, last) {
			last = "1"
		}
		for _, bad := range []string{"", "sluice-adm-x", secret[:len(secret)-1] + last, strings.Replace(secret, adminSecretPrefix, secretPrefix, 1)} {
			if _, err := c.AuthenticateAdminToken(ctx, bad); !errors.Is(err, ErrUnknownToken) {
				t.Errorf("%q: %v, want ErrUnknownToken", bad, err)
			}
		}
		clock.Advance(time.Hour)
		if _, err := c.AuthenticateAdminToken(ctx, secret); !errors.Is(err, ErrExpiredToken) {
			t.Fatalf("expired: %v", err)
		}
		secret2, tok2, err := c.CreateAdminToken(ctx, AdminToken{Role: RoleAdmin}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.RevokeAdminToken(ctx, tok2.ID, "admin"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AuthenticateAdminToken(ctx, secret2); !errors.Is(err, ErrRevokedToken) {
			t.Fatalf("revoked: %v", err)
		}
		if err := c.RevokeAdminToken(ctx, "nope", "admin"); !errors.Is(err, ErrUnknownToken) {
			t.Fatalf("revoke unknown: %v", err)
		}
		list, err := c.ListAdminTokens(ctx)
		if err != nil || len(list) != 2 || list[1].RevokedAt.IsZero() {
			t.Fatalf("list = %+v, %v", list, err)
		}
		for name, bad := range map[string]AdminToken{
			"no role":            {},
			"bad role":           {Role: "owner"},
			"viewer, no scope":   {Role: RoleViewer},
			"admin with scope":   {Role: RoleAdmin, Workspaces: []string{"a"}},
			"empty workspace":    {Role: RoleViewer, Workspaces: []string{""}},
			"expiry in the past": {Role: RoleAdmin, ExpiresAt: clock.Now().Add(-time.Second)},
		} {
			if _, _, err := c.CreateAdminToken(ctx, bad, "admin"); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		entries, _ := c.ListAudit(ctx, AuditQuery{})
		if len(entries) != 3 {
			t.Fatalf("audit has %d entries, want 3 (two creations, one revocation)", len(entries))
		}
	})
}

func TestCatalog_SubjectOverrideNeedsAKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		_, k, err := c.CreateKey(ctx, Key{Workspace: "acme", User: "ada", Team: "core"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []Override{
			{Rule: "daily", Attribute: "workspace", Value: "acme", Limit: ptr(5)},
			{Rule: "daily", Attribute: "user", Value: "ada", Limit: ptr(5)},
			{Rule: "daily", Attribute: "key", Value: k.ID, Limit: nil},
			{Rule: "daily", Attribute: "team", Value: "core", Limit: ptr(0)},
			{Rule: "daily", Attribute: "org", Value: "default", Limit: ptr(0)},
		} {
			if err := c.SetSubjectOverride(ctx, o, "admin"); err != nil {
				t.Errorf("%s %s: %v", o.Attribute, o.Value, err)
			}
		}
		for _, o := range []Override{
			{Rule: "daily", Attribute: "workspace", Value: "ghost", Limit: ptr(5)},
			{Rule: "daily", Attribute: "user", Value: "acme", Limit: ptr(5)},
			{Rule: "daily", Attribute: "key", Value: "nokey", Limit: ptr(5)},
		} {
			if err := c.SetSubjectOverride(ctx, o, "admin"); !errors.Is(err, ErrUnknownSubject) {
				t.Errorf("%s %s: %v, want ErrUnknownSubject", o.Attribute, o.Value, err)
			}
		}
		if err := c.SetSubjectOverride(ctx, Override{Rule: "daily", Attribute: "ip", Value: "10.0.0.1"}, "admin"); !errors.Is(err, ErrInvalid) {
			t.Errorf("ip: %v, want ErrInvalid", err)
		}
		list, _ := c.ListOverrides(ctx)
		if len(list) != 5 {
			t.Fatalf("%d overrides stored, want 5", len(list))
		}
		// Entries about a workspace or one of its keys carry the workspace, so a
		// scoped viewer finds them.
		scoped, err := c.ListAudit(ctx, AuditQuery{Workspaces: []string{"acme"}})
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, e := range scoped {
			actions = append(actions, e.Action+" "+e.Target)
		}
		want := []string{"override.set override/daily/key/" + k.ID, "override.set override/daily/workspace/acme", "key.create key/" + k.ID}
		if strings.Join(actions, "|") != strings.Join(want, "|") {
			t.Fatalf("acme's entries = %q, want %q", actions, want)
		}
		if ok, err := c.SubjectExists(ctx, "workspace", "acme"); !ok || err != nil {
			t.Fatalf("SubjectExists(acme) = %v, %v", ok, err)
		}
		if ok, err := c.SubjectExists(ctx, "user", "nobody"); ok || err != nil {
			t.Fatalf("SubjectExists(nobody) = %v, %v", ok, err)
		}
	})
}
