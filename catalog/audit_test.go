package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestCatalog_AuditFilters(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		start := clock.Now()
		for _, e := range []AuditEntry{
			{Actor: "alice", Action: "rule.update", Target: "rule/chat", Before: map[string]int{"limit": 10}, After: map[string]int{"limit": 20}},
			{Actor: "bob", Action: "rule.update", Target: "rule/chat", Denied: true},
			{Actor: "alice", Action: "rule.delete", Target: "rule/embed", Before: json.RawMessage(`{"limit":5}`)},
			{Actor: "carol", Action: "login", At: start.Add(time.Hour)},
		} {
			clock.Advance(time.Minute)
			if err := c.Audit(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		ids := func(q AuditQuery) []int64 {
			t.Helper()
			entries, err := c.ListAudit(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var out []int64
			for _, e := range entries {
				out = append(out, e.ID)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			q    AuditQuery
			want []int64
		}{
			{"all, newest first", AuditQuery{}, []int64{4, 3, 2, 1}},
			{"actor", AuditQuery{Actor: "alice"}, []int64{3, 1}},
			{"action", AuditQuery{Action: "rule.update"}, []int64{2, 1}},
			{"target", AuditQuery{Target: "rule/chat"}, []int64{2, 1}},
			{"actor and action", AuditQuery{Actor: "alice", Action: "rule.update"}, []int64{1}},
			{"since is inclusive", AuditQuery{Since: start.Add(2 * time.Minute)}, []int64{4, 3, 2}},
			{"limit", AuditQuery{Limit: 2}, []int64{4, 3}},
			{"next page", AuditQuery{Limit: 2, BeforeID: 3}, []int64{2, 1}},
			{"no match", AuditQuery{Actor: "mallory"}, nil},
		} {
			got := ids(tc.q)
			if len(got) != len(tc.want) {
				t.Errorf("%s: ids = %v, want %v", tc.name, got, tc.want)
				continue
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("%s: ids = %v, want %v", tc.name, got, tc.want)
					break
				}
			}
		}
		entries, err := c.ListAudit(ctx, AuditQuery{})
		if err != nil {
			t.Fatal(err)
		}
		first, denied, login := entries[3], entries[2], entries[0]
		if !first.At.Equal(start.Add(time.Minute)) || first.Actor != "alice" || first.Denied {
			t.Errorf("first entry = %+v", first)
		}
		if string(first.Before.(json.RawMessage)) != `{"limit":10}` || string(first.After.(json.RawMessage)) != `{"limit":20}` {
			t.Errorf("first entry before/after = %s / %s", first.Before, first.After)
		}
		if !denied.Denied || denied.Before != nil || denied.After != nil {
			t.Errorf("denied entry = %+v, want Denied and no before/after", denied)
		}
		if !login.At.Equal(start.Add(time.Hour)) {
			t.Errorf("an entry's own At was replaced: %v", login.At)
		}
	})
}

func TestCatalog_AuditValidates(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for _, e := range []AuditEntry{{Action: "x"}, {Actor: "x"}} {
			if err := c.Audit(ctx, e); !errors.Is(err, ErrInvalid) {
				t.Errorf("Audit(%+v): err = %v, want ErrInvalid", e, err)
			}
		}
		if err := c.Audit(ctx, AuditEntry{Actor: "a", Action: "b", After: func() {}}); err == nil {
			t.Error("Audit with an unencodable After succeeded")
		}
	})
}

func TestCatalog_KeyChangesAudited(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		_, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.RotateKey(ctx, k.ID, "bob"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		if err := c.RevokeKey(ctx, k.ID, "carol"); err != nil {
			t.Fatal(err)
		}
		entries, err := c.ListAudit(ctx, AuditQuery{Target: "key/" + k.ID})
		if err != nil {
			t.Fatal(err)
		}
		want := []struct{ actor, action string }{{"carol", ActionKeyRevoke}, {"bob", ActionKeyRotate}, {"alice", ActionKeyCreate}}
		if len(entries) != len(want) {
			t.Fatalf("audit = %+v, want %d entries", entries, len(want))
		}
		for i, w := range want {
			if entries[i].Actor != w.actor || entries[i].Action != w.action {
				t.Errorf("entry %d = %s %s, want %s %s", i, entries[i].Actor, entries[i].Action, w.actor, w.action)
			}
		}
		var before, after Key
		json.Unmarshal(entries[0].Before.(json.RawMessage), &before)
		json.Unmarshal(entries[0].After.(json.RawMessage), &after)
		if before.ID != k.ID || !before.RevokedAt.IsZero() || !after.RevokedAt.Equal(clock.Now()) {
			t.Errorf("revoke before/after = %+v / %+v", before, after)
		}
		if entries[2].Before != nil {
			t.Errorf("create has a before: %s", entries[2].Before)
		}
	})
}

// A change whose audit entry cannot be written does not happen.
func TestCatalog_ChangeAndAuditAreOneTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		be.refuseInserts(t, c, "audit_log")
		if _, _, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "alice"); err == nil {
			t.Fatal("CreateKey succeeded without its audit entry")
		}
		if err := c.SetOverride(ctx, Override{Rule: "r", Attribute: "workspace", Value: "w"}, "alice"); err == nil {
			t.Fatal("SetOverride succeeded without its audit entry")
		}
		keys, _ := c.ListKeys(ctx, "")
		overrides, _ := c.ListOverrides(ctx)
		if len(keys) != 0 || len(overrides) != 0 {
			t.Fatalf("changes stayed without audit: keys %v, overrides %v", keys, overrides)
		}
	})
}
