package catalog

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sluicehq/sluice/internal/migrate"
)

// rawDB opens the backend's database without migrating it.
func (be *backend) rawDB(t *testing.T) *sql.DB {
	t.Helper()
	var db *sql.DB
	if be.path != "" {
		var err error
		if db, err = sql.Open("sqlite", "file:"+be.path); err != nil {
			t.Fatal(err)
		}
	} else {
		cfg, err := pgx.ParseConfig(be.url)
		if err != nil {
			t.Fatal(err)
		}
		db = stdlib.OpenDB(*cfg)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestCatalog_MigratesThePreviousVersionsTenancy opens a catalog whose
// schema and rows the version before tenancy wrote (migrations up to 0003):
// its rules stored for "default" (which applied in every org) become
// deployment rules, its overrides of workspaces are the default org's, and
// a viewer token reads the default org.
func TestCatalog_MigratesThePreviousVersionsTenancy(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		ctx := context.Background()
		db := be.rawDB(t)
		ms, err := be.d.migrations()
		if err != nil {
			t.Fatal(err)
		}
		if err := migrate.Run(ctx, db, ms[:3], be.d.migrateOptions()); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`INSERT INTO rules (name, org, definition, enabled, created_at, updated_at)
				VALUES ('chat_rpm', 'default', '{"name":"chat_rpm","org":"default","kind":"rate","subject":"workspace","limit":5,"window":"1m0s","enabled":true}', TRUE, 1, 1)`,
			`INSERT INTO rules (name, org, definition, enabled, created_at, updated_at)
				VALUES ('acme_daily', 'acme', '{"name":"acme_daily","org":"acme","kind":"budget","subject":"workspace","limit":5,"period":"day","enabled":true}', TRUE, 1, 1)`,
			`INSERT INTO overrides (rule, attribute, value, limit_value, updated_at) VALUES ('chat_rpm', 'workspace', 'ws', 9, 1)`,
			`INSERT INTO overrides (rule, attribute, value, limit_value, updated_at) VALUES ('chat_rpm', 'key', 'k1', 3, 1)`,
			`INSERT INTO admin_tokens (id, secret_hash, role, workspaces, created_by, created_at) VALUES ('t1', '', 'viewer', '["ws"]', 'admin', 1)`,
			`INSERT INTO usage_ledger (workspace, day, route, model, requests, input_tokens) VALUES ('ws', '2026-03-04', 'chat', 'm', 2, 700)`,
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		c, _ := be.openTest(t)
		rules, err := c.ListRules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range rules {
			got[r.Name] = r.Org
		}
		if len(got) != 2 || got["chat_rpm"] != "" || got["acme_daily"] != "acme" {
			t.Fatalf("rules after the upgrade %v, want chat_rpm for every org and acme_daily for acme", got)
		}
		overrides, err := c.ListOverrides(ctx)
		if err != nil || len(overrides) != 2 {
			t.Fatalf("overrides %+v, %v", overrides, err)
		}
		for _, o := range overrides {
			if want := map[string]string{"workspace": "default", "key": ""}[o.Attribute]; o.Org != want {
				t.Errorf("override of %s: org %q, want %q", o.Attribute, o.Org, want)
			}
		}
		tokens, err := c.ListAdminTokens(ctx)
		if err != nil || len(tokens) != 1 || tokens[0].Org != "default" {
			t.Fatalf("tokens %+v, %v, want the viewer in the default org", tokens, err)
		}
		usage, err := c.Usage(ctx, UsageQuery{Org: "default", GroupBy: []string{"org", "workspace"}})
		if err != nil || len(usage) != 1 || usage[0].Org != "default" || usage[0].InputTokens != 700 {
			t.Fatalf("usage %+v, %v, want the ledger row in the default org", usage, err)
		}
	})
}

// The usage ledger keeps two orgs' workspaces of one name apart.
func TestCatalog_LedgerPerOrg(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		for org, n := range map[string]int64{"acme": 100, "beta": 7, "": 1} {
			c.RecordUsage(UsageEntry{Org: org, Workspace: "shared", Route: "chat", Model: "m", Requests: 1, InputTokens: n, At: clock.Now()})
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for org, want := range map[string]int64{"acme": 100, "beta": 7, "default": 1} {
			rows, err := c.Usage(ctx, UsageQuery{Org: org, Workspace: "shared"})
			if err != nil || len(rows) != 1 || rows[0].InputTokens != want {
				t.Errorf("org %s: %+v, %v, want %d input tokens", org, rows, err, want)
			}
		}
		rows, err := c.Usage(ctx, UsageQuery{GroupBy: []string{"org"}})
		if err != nil || len(rows) != 3 {
			t.Fatalf("by org: %+v, %v", rows, err)
		}
	})
}

// Rule names are unique within an org: two orgs, and the deployment, may
// each store a rule of one name, and each is changed on its own.
func TestCatalog_RuleNamesPerOrg(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for _, org := range []string{"", "acme", "beta"} {
			r := rpmRule("chat_rpm")
			r.Org = org
			if _, err := c.CreateRule(ctx, r, "alice"); err != nil {
				t.Fatalf("org %q: %v", org, err)
			}
		}
		r := rpmRule("chat_rpm")
		r.Org, r.Limit = "acme", 7
		if _, err := c.UpdateRule(ctx, "acme", "chat_rpm", r, "bob"); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteRule(ctx, "beta", "chat_rpm", "bob"); err != nil {
			t.Fatal(err)
		}
		for org, want := range map[string]int64{"": 60, "acme": 7} {
			got, err := c.GetRule(ctx, org, "chat_rpm")
			if err != nil || got.Limit != want || got.Org != org {
				t.Errorf("org %q: %+v, %v, want limit %d", org, got, err, want)
			}
		}
		if _, err := c.GetRule(ctx, "beta", "chat_rpm"); !errors.Is(err, ErrUnknownRule) {
			t.Errorf("beta's deleted rule: %v", err)
		}
		acme, _ := c.ListRules(ctx, "acme")
		both, _ := c.ListRules(ctx, "", "acme")
		if len(acme) != 1 || len(both) != 2 {
			t.Fatalf("acme lists %d rules, deployment and acme %d", len(acme), len(both))
		}
		entries, _ := c.ListAudit(ctx, AuditQuery{Target: "rule/acme/chat_rpm"})
		if len(entries) != 2 {
			t.Fatalf("acme's rule has %d audit entries, want create and update", len(entries))
		}
	})
}

// Two orgs' workspaces of one name have overrides of their own.
func TestCatalog_OverridesPerOrg(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for _, org := range []string{"acme", "beta"} {
			if _, _, err := c.CreateKey(ctx, Key{Org: org, Workspace: "shared", User: "u"}, "alice"); err != nil {
				t.Fatal(err)
			}
		}
		limit := int64(5)
		for _, org := range []string{"acme", "beta"} {
			if err := c.SetSubjectOverride(ctx, Override{Rule: "daily", Org: org, Attribute: "workspace", Value: "shared", Limit: &limit}, "alice"); err != nil {
				t.Fatalf("org %s: %v", org, err)
			}
		}
		if err := c.SetSubjectOverride(ctx, Override{Rule: "daily", Org: "gamma", Attribute: "workspace", Value: "shared", Limit: &limit}, "alice"); !errors.Is(err, ErrUnknownSubject) {
			t.Fatalf("override of a workspace no key of gamma has: %v, want ErrUnknownSubject", err)
		}
		if err := c.DeleteOverride(ctx, Override{Rule: "daily", Org: "acme", Attribute: "workspace", Value: "shared"}, "alice"); err != nil {
			t.Fatal(err)
		}
		all, _ := c.ListOverrides(ctx)
		if len(all) != 1 || all[0].Org != "beta" {
			t.Fatalf("overrides %+v, want beta's only", all)
		}
	})
}

// A key's identity values are refused when the engine could not count
// them apart: control characters, or over 256 bytes.
func TestCatalog_KeyValuesChecked(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		long := string(make([]byte, MaxValueBytes+1))
		for name, k := range map[string]Key{
			"separator in workspace": {Workspace: "a\x1eb", User: "u"},
			"newline in user":        {Workspace: "ws", User: "u\n"},
			"long org":               {Org: long, Workspace: "ws", User: "u"},
		} {
			if _, _, err := c.CreateKey(ctx, k, "alice"); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
	})
}

// The cap of open sessions per user counts the user within its org.
func TestCatalog_OpenSessionsCappedPerOrg(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		for _, org := range []string{"orgA", "orgB"} {
			s := testSession(clock)
			s.Org, s.KeyID = org, "key-"+org
			if _, _, err := c.OpenSession(ctx, s, 1); err != nil {
				t.Fatalf("org %s's first session: %v", org, err)
			}
		}
		s := testSession(clock)
		s.Org, s.KeyID = "orgA", "key-orgA"
		if _, _, err := c.OpenSession(ctx, s, 1); !errors.Is(err, ErrTooManySessions) {
			t.Fatalf("orgA's second session: %v, want ErrTooManySessions", err)
		}
	})
}

// An override may name a workspace or user that only a service key of the
// org asserts; not one outside its list, nor one of another org.
func TestCatalog_OverrideOfAnAssertedSubject(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		if _, _, err := c.CreateKey(ctx, Key{Org: "acme", Workspace: "app", User: "server", Assert: []string{"workspace", "user"}, AssertWorkspaces: []string{"team-*"}}, "alice"); err != nil {
			t.Fatal(err)
		}
		limit := int64(5)
		for _, tt := range []struct {
			org, attribute, value string
			ok                    bool
		}{
			{"acme", "workspace", "team-red", true},
			{"acme", "workspace", "other", false},
			{"acme", "user", "alice", true},
			{"acme", "team", "design", false},
			{"beta", "user", "alice", false},
		} {
			err := c.SetSubjectOverride(ctx, Override{Rule: "daily", Org: tt.org, Attribute: tt.attribute, Value: tt.value, Limit: &limit}, "alice")
			if got := err == nil; got != tt.ok || (!tt.ok && !errors.Is(err, ErrUnknownSubject)) {
				t.Errorf("%s %s %q: %v, want ok %v", tt.org, tt.attribute, tt.value, err, tt.ok)
			}
		}
	})
}
