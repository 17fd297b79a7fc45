package sluice_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

// perMinute is a rate rule of limit requests a minute on subject.
func perMinute(name, subject string, limit int64) sluice.Rule {
	return sluice.Rule{Name: name, Kind: sluice.KindRate, Subject: subject, Limit: limit, Window: time.Minute}
}

// Two orgs that use the same workspace, team, user and tag names share no
// counter; an org rule counts each org's own; global counts both.
func TestTenancy_SameNamesInTwoOrgsShareNothing(t *testing.T) {
	for _, subject := range []string{"workspace", "team", "user", "tag", "workspace+user", "org"} {
		t.Run(subject, func(t *testing.T) {
			l, _ := withRules(t, perMinute("per", subject, 2))
			a := sluice.Identity{Org: "orgA", Workspace: "shared", Team: "t", User: "dup", Key: "ka", Tags: []string{"x"}}
			b := sluice.Identity{Org: "orgB", Workspace: "shared", Team: "t", User: "dup", Key: "kb", Tags: []string{"x"}}
			admit(t, l, sluice.Request{Identity: a})
			admit(t, l, sluice.Request{Identity: a})
			refuse(t, l, sluice.Request{Identity: a}, sluice.ErrRateLimited)
			if n := admitN(t, l, sluice.Request{Identity: b}, 5); n != 2 {
				t.Fatalf("orgB admitted %d after orgA spent its limit, want its own 2", n)
			}
		})
	}
	t.Run("global", func(t *testing.T) {
		l, _ := withRules(t, perMinute("per", "global", 2))
		admit(t, l, sluice.Request{Identity: sluice.Identity{Org: "orgA", Workspace: "shared"}})
		admit(t, l, sluice.Request{Identity: sluice.Identity{Org: "orgB", Workspace: "shared"}})
		refuse(t, l, sluice.Request{Identity: sluice.Identity{Org: "orgC"}}, sluice.ErrRateLimited)
	})
	t.Run("model stays deployment-wide", func(t *testing.T) {
		l, _ := withRules(t, perMinute("per", "model", 1))
		admit(t, l, sluice.Request{Identity: sluice.Identity{Org: "orgA", Model: "m"}})
		refuse(t, l, sluice.Request{Identity: sluice.Identity{Org: "orgB", Model: "m"}}, sluice.ErrRateLimited)
	})
	t.Run("org+model is per org", func(t *testing.T) {
		l, _ := withRules(t, perMinute("per", "org+model", 1))
		admit(t, l, sluice.Request{Identity: sluice.Identity{Org: "orgA", Model: "m"}})
		admit(t, l, sluice.Request{Identity: sluice.Identity{Org: "orgB", Model: "m"}})
		refuse(t, l, sluice.Request{Identity: sluice.Identity{Org: "orgB", Model: "m"}}, sluice.ErrRateLimited)
	})
}

// The default org counts bare values, as before values were qualified, so a
// deployment with one org keeps its counters across the upgrade; "" and
// "default" are one org.
func TestTenancy_DefaultOrgCountsBareValues(t *testing.T) {
	l, _ := withRules(t, perMinute("per", "workspace+user", 5))
	for _, org := range []string{"", sluice.DefaultOrg} {
		r := admit(t, l, sluice.Request{Identity: sluice.Identity{Org: org, Workspace: "ws", User: "u"}})
		if got := r.Charges()[0].Key.Subject; got != "ws\x1fu" {
			t.Fatalf("org %q: subject %q, want the bare ws\\x1fu", org, got)
		}
	}
	r := admit(t, l, sluice.Request{Identity: sluice.Identity{Org: "acme", Workspace: "ws", User: "u"}})
	if got := r.Charges()[0].Key.Subject; got != "acme\x1ews\x1facme\x1eu" {
		t.Fatalf("subject %q, want each value within its org", got)
	}
}

// A session is counted within its key.
func TestTenancy_SessionWithinItsKey(t *testing.T) {
	l, _ := withRules(t, perMinute("per_session", "session", 1))
	admit(t, l, sluice.Request{Identity: sluice.Identity{Key: "k1", Session: "s"}})
	admit(t, l, sluice.Request{Identity: sluice.Identity{Key: "k2", Session: "s"}})
	refuse(t, l, sluice.Request{Identity: sluice.Identity{Key: "k2", Session: "s"}}, sluice.ErrRateLimited)
}

// A rule with an Org applies to that org's requests only; one of the same
// name replaces the deployment's rule in that org, and counts apart.
func TestTenancy_OrgRulesApplyInTheirOrg(t *testing.T) {
	deployment := perMinute("rpm", "workspace", 2)
	tight := perMinute("tight", "workspace", 1)
	tight.Org = "orgA"
	raised := perMinute("rpm", "workspace", 3)
	raised.Org = "orgB"
	def := perMinute("def_only", "workspace", 1)
	def.Org = sluice.DefaultOrg
	l, _ := withRules(t, deployment, tight, raised, def)

	in := func(org string) sluice.Request {
		return sluice.Request{Identity: sluice.Identity{Org: org, Workspace: "ws"}}
	}
	tests := []struct {
		org  string
		want int
	}{
		{"orgA", 1},    // its own rule is the tighter
		{"orgB", 3},    // its rpm replaces the deployment's 2
		{"orgC", 2},    // the deployment's rule only
		{"", 1},        // the default org's own rule
		{"default", 0}, // the same org as "", already spent
	}
	for _, tt := range tests {
		if n := admitN(t, l, in(tt.org), 10); n != tt.want {
			t.Errorf("org %q admitted %d, want %d", tt.org, n, tt.want)
		}
	}
	names := func(org string) map[string]bool {
		all, err := l.Effective(context.Background(), in(org).Identity)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, e := range all {
			out[e.Rule] = true
		}
		return out
	}
	if got := names("orgC"); got["tight"] || got["def_only"] || !got["rpm"] {
		t.Errorf("orgC sees rules %v, want the deployment's rpm only", got)
	}
	// A disabled org rule still replaces the deployment's rule in its org.
	off := perMinute("rpm", "workspace", 3)
	off.Org, off.Disabled = "orgD", true
	l2, _ := withRules(t, deployment, off)
	if n := admitN(t, l2, in("orgD"), 10); n != 10 {
		t.Errorf("orgD admitted %d with its rpm disabled, want no limit", n)
	}
	if n := admitN(t, l2, in("orgE"), 10); n != 2 {
		t.Errorf("orgE admitted %d, want the deployment's 2", n)
	}
	// Two rules of one name in one org are refused; in two orgs they are not.
	if _, err := sluice.New(sluice.Options{Rules: []sluice.Rule{raised, raised}}); err == nil {
		t.Error("two rules named rpm in orgB compiled")
	}
}

// Two identities that differ in any attribute on a subject's path (the
// attribute, its org for a workspace, team, user or tag, its key for a
// session) never share a counter.
func TestTenancy_DifferentPathsNeverShareACounter(t *testing.T) {
	subjects := []string{"org", "workspace", "team", "user", "key", "session", "tag", "workspace+user", "org+team", "ip", "model"}
	// path returns what must tell two identities apart on subject.
	path := func(id sluice.Identity, attr string) []string {
		org := id.Org
		if org == "" {
			org = sluice.DefaultOrg
		}
		switch attr {
		case "org":
			return []string{id.Org}
		case "workspace":
			return []string{org, id.Workspace}
		case "team":
			return []string{org, id.Team}
		case "user":
			return []string{org, id.User}
		case "tag":
			return []string{org, id.Tags[0]}
		case "key":
			return []string{id.Key}
		case "session":
			return []string{id.Key, id.Session}
		case "ip":
			return []string{id.IP}
		case "model":
			return []string{id.Model}
		}
		panic(attr)
	}
	rapid.Check(t, func(t *rapid.T) {
		value := rapid.SampledFrom([]string{"", "a", "b", "default", "a/b", "x y"})
		draw := func(label string) sluice.Identity {
			return sluice.Identity{
				Org: value.Draw(t, label+"org"), Workspace: value.Draw(t, label+"ws"), Team: value.Draw(t, label+"team"),
				User: value.Draw(t, label+"user"), Key: value.Draw(t, label+"key"), Session: "s" + value.Draw(t, label+"session"),
				IP: value.Draw(t, label+"ip"), Model: value.Draw(t, label+"model"), Tags: []string{"t" + value.Draw(t, label+"tag")},
			}
		}
		subject := rapid.SampledFrom(subjects).Draw(t, "subject")
		a, b := draw("a"), draw("b")
		l, _ := newLimiter(t, sluice.Options{Rules: []sluice.Rule{perMinute("per", subject, 100)}})
		charged := func(id sluice.Identity) string {
			r, err := l.Admit(context.Background(), sluice.Request{Identity: id})
			if err != nil {
				t.Fatalf("admit: %v", err)
			}
			defer r.Release(context.Background())
			return r.Charges()[0].Key.Subject
		}
		samePath := true
		for _, part := range splitSubject(subject) {
			pa, pb := path(a, part), path(b, part)
			for i := range pa {
				if pa[i] != pb[i] {
					samePath = false
				}
			}
		}
		if sa, sb := charged(a), charged(b); (sa == sb) != samePath {
			t.Fatalf("subject %s: %+v and %+v charge %q and %q; same path %v", subject, a, b, sa, sb, samePath)
		}
	})
}

func splitSubject(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '+' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// A deployment of many orgs holds more rules than a 16-bit index names:
// 400 orgs of 200 rules each compile, and each org's rules apply.
func TestTenancy_ManyOrgsOfManyRules(t *testing.T) {
	var rules []sluice.Rule
	for o := range 400 {
		for i := range 200 {
			rules = append(rules, sluice.Rule{Name: fmt.Sprintf("r%d", i), Org: fmt.Sprintf("org-%d", o), Kind: sluice.KindRate,
				Subject: "user", Limit: int64(1 + o%2), Window: time.Minute, Match: sluice.Match{Models: []string{fmt.Sprintf("m%d", i)}}})
		}
	}
	l, _ := withRules(t, rules...)
	for _, o := range []int{0, 1, 398, 399} {
		req := sluice.Request{Identity: sluice.Identity{Org: fmt.Sprintf("org-%d", o), User: "u", Model: "m199"}}
		if n := admitN(t, l, req, 5); n != 1+o%2 {
			t.Errorf("org-%d admitted %d, want its rule's %d", o, n, 1+o%2)
		}
	}
}
