package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func rpmRule(name string) Rule {
	return Rule{Rule: sluice.Rule{Name: name, Kind: sluice.KindRate, Subject: "workspace+user", Limit: 60, Window: time.Minute}}
}

func TestCatalog_RulesCreateUpdateDeleteAudited(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		created, err := c.CreateRule(ctx, rpmRule("chat_rpm"), "alice")
		if err != nil {
			t.Fatal(err)
		}
		if created.Org != "" || !created.CreatedAt.Equal(clock.Now()) {
			t.Fatalf("created = %+v", created)
		}
		if _, err := c.CreateRule(ctx, rpmRule("chat_rpm"), "alice"); !errors.Is(err, ErrRuleExists) {
			t.Fatalf("second create: %v, want ErrRuleExists", err)
		}
		clock.Advance(time.Minute)
		upd := rpmRule("")
		upd.Window = time.Hour
		got, err := c.UpdateRule(ctx, "", "chat_rpm", upd, "bob")
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != "chat_rpm" || got.Window != time.Hour || !got.CreatedAt.Equal(created.CreatedAt) || !got.UpdatedAt.Equal(clock.Now()) {
			t.Fatalf("updated = %+v", got)
		}
		if _, err := c.UpdateRule(ctx, "", "chat_rpm", rpmRule("other"), "bob"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("rename: %v, want ErrInvalid", err)
		}
		if _, err := c.SetRuleEnabled(ctx, "", "chat_rpm", false, "carol"); err != nil {
			t.Fatal(err)
		}
		stored, err := c.GetRule(ctx, "", "chat_rpm")
		if err != nil || !stored.Disabled {
			t.Fatalf("after disable: %+v, %v", stored, err)
		}
		if err := c.DeleteRule(ctx, "", "chat_rpm", "dave"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetRule(ctx, "", "chat_rpm"); !errors.Is(err, ErrUnknownRule) {
			t.Fatalf("get after delete: %v", err)
		}
		if err := c.DeleteRule(ctx, "", "chat_rpm", "dave"); !errors.Is(err, ErrUnknownRule) {
			t.Fatalf("second delete: %v", err)
		}
		entries, err := c.ListAudit(ctx, AuditQuery{Target: "rule/chat_rpm"})
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, e := range entries {
			actions = append(actions, e.Actor+":"+e.Action)
		}
		want := "dave:rule.delete carol:rule.update bob:rule.update alice:rule.create"
		if strings.Join(actions, " ") != want {
			t.Fatalf("audit = %s, want %s", strings.Join(actions, " "), want)
		}
		var before struct{ Window string }
		if err := json.Unmarshal(entries[2].Before.(json.RawMessage), &before); err != nil || before.Window != "1m0s" {
			t.Fatalf("update's before = %s, %v", entries[2].Before, err)
		}
	})
}

func TestCatalog_RuleValidation(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for name, r := range map[string]Rule{
			"negative limit":  {Rule: sluice.Rule{Name: "a", Kind: sluice.KindRate, Subject: "user", Limit: -1, Window: time.Minute}},
			"no window":       {Rule: sluice.Rule{Name: "a", Kind: sluice.KindRate, Subject: "user", Limit: 1}},
			"bad kind":        {Rule: sluice.Rule{Name: "a", Kind: "bucket", Subject: "user", Limit: 1}},
			"bad subject":     {Rule: sluice.Rule{Name: "a", Kind: sluice.KindBudget, Subject: "planet", Limit: 1, Period: sluice.PeriodDay}},
			"no name":         {Rule: sluice.Rule{Kind: sluice.KindBudget, Subject: "user", Limit: 1, Period: sluice.PeriodDay}},
			"slash in name":   {Rule: sluice.Rule{Name: "a/b", Kind: sluice.KindBudget, Subject: "user", Limit: 1, Period: sluice.PeriodDay}},
			"bad time zone":   {Rule: sluice.Rule{Name: "a", Kind: sluice.KindBudget, Subject: "user", Limit: 1, Period: sluice.PeriodDay, TimeZone: "Mars/Olympus"}},
			"soft over limit": {Rule: sluice.Rule{Name: "a", Kind: sluice.KindBudget, Subject: "user", Limit: 1, SoftLimit: 2, Period: sluice.PeriodDay}},
			"control in org":  {Rule: sluice.Rule{Name: "a", Kind: sluice.KindBudget, Subject: "user", Limit: 1, Period: sluice.PeriodDay, Org: "a\x1eb"}},
		} {
			if _, err := c.CreateRule(ctx, r, "alice"); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		rules, _ := c.ListRules(ctx)
		entries, _ := c.ListAudit(ctx, AuditQuery{})
		if len(rules) != 0 || len(entries) != 0 {
			t.Fatalf("invalid rules left %d rules and %d audit entries", len(rules), len(entries))
		}
	})
}

func TestCatalog_RulesAtMost200PerOrg(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		for i := range MaxRulesPerOrg {
			r := rpmRule(fmt.Sprintf("r%03d", i))
			r.Org = "acme"
			if _, err := c.CreateRule(ctx, r, "alice"); err != nil {
				t.Fatal(err)
			}
		}
		r := rpmRule("r200")
		r.Org = "acme"
		_, err := c.CreateRule(ctx, r, "alice")
		if !errors.Is(err, ErrTooManyRules) || !strings.Contains(err.Error(), "200") {
			t.Fatalf("201st rule: %v, want ErrTooManyRules naming 200", err)
		}
		r.Org = "beta"
		if _, err := c.CreateRule(ctx, r, "alice"); err != nil {
			t.Fatalf("another org's first rule: %v", err)
		}
		// A rule stays in the org it was created in.
		r.Org = "acme"
		if _, err := c.UpdateRule(ctx, "beta", "r200", r, "alice"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("move into another org: %v, want ErrInvalid", err)
		}
		acme, _ := c.ListRules(ctx, "acme")
		beta, _ := c.ListRules(ctx, "beta")
		if len(acme) != MaxRulesPerOrg || len(beta) != 1 {
			t.Fatalf("acme %d, beta %d rules", len(acme), len(beta))
		}
	})
}
