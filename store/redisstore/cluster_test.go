package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestCluster_Conformance runs the conformance suite on a three-master Redis
// Cluster started for the test. With the default tenant (the first part of
// the subject), a request's key rules and workspace rules fall in different
// slots, so the suite also exercises admission in steps and compensation.
func TestCluster_Conformance(t *testing.T) {
	t.Parallel()
	url := clusterURL(t)
	var split atomic.Int64
	t.Run("suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) sluice.Store {
			s := openStore(t, redisstore.Options{URL: url, PinTime: true})
			if !s.Cluster() {
				t.Fatal("store on a cluster URL is not in cluster mode")
			}
			t.Cleanup(func() { split.Add(s.Stats().SplitAdmissions) })
			return s
		})
	})
	if split.Load() == 0 {
		t.Fatal("no batch spanned two slots: the two-step path was not exercised")
	}
	t.Logf("%d admissions spanned slots", split.Load())
}

// TestCluster_SweepWithoutProbeScript sweeps with the pipelined fallback
// that reads every slot's deadline index, as when the per-master probe
// script cannot run.
func TestCluster_SweepWithoutProbeScript(t *testing.T) {
	url := clusterURL(t)
	redisstore.ForceChunkedProbe(true)
	defer redisstore.ForceChunkedProbe(false)
	h := harness(t, redisstore.Options{URL: url, PinTime: true})
	l := h.Limiter(sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1000, Period: sluice.PeriodDay, Metric: sluice.MetricTokens},
		sluice.Rule{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 2})
	h.Admit(l, storetest.Tokens("k", 100, 0))
	h.Admit(l, storetest.Tokens("k2", 100, 0))
	h.Clock.Advance(2 * time.Minute)
	res, err := l.Sweep(h.Ctx)
	if err != nil || res != (sluice.SweepResult{Reservations: 2, Charged: 2}) {
		t.Fatalf("sweep: %+v %v, want 2 reservations charged", res, err)
	}
}

// TestCluster_TenantsSpreadByOrg: every counter an org's request charges
// (its org, workspaces, teams and users, qualified by the org) shares the
// org's slot, so one script admits it, and orgs spread over the masters.
func TestCluster_TenantsSpreadByOrg(t *testing.T) {
	url := clusterURL(t)
	prefix := freshPrefix()
	h := harness(t, redisstore.Options{URL: url, PinTime: true, Prefix: prefix})
	l := h.Limiter(
		sluice.Rule{Name: "per_user", Kind: sluice.KindRate, Subject: "workspace+user", Limit: 10, Window: time.Minute},
		sluice.Rule{Name: "per_team", Kind: sluice.KindConcurrency, Subject: "team", Limit: 10},
		sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodDay},
		sluice.Rule{Name: "per_org", Kind: sluice.KindBudget, Subject: "org", Limit: 1000, Period: sluice.PeriodDay},
	)
	const orgs = 24
	for i := range orgs {
		r := h.Admit(l, sluice.Request{Identity: sluice.Identity{Org: fmt.Sprintf("org-%d", i), Workspace: "shared", Team: "t", User: "dup"},
			Max: sluice.Usage{InputTokens: 10}})
		h.Settle(r, sluice.Usage{InputTokens: 5})
	}
	if n := h.Store.(*redisstore.Store).Stats().SplitAdmissions; n != 0 {
		t.Fatalf("%d admissions spanned slots, want every org's counters in its own slot", n)
	}
	raw, err := redisstore.RawClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	orgsOn := map[string]map[string]bool{} // master -> orgs with counters there
	mastersOf := map[string]map[string]bool{}
	for addr, node := range raw.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatalf("scan %s: %v", addr, err)
			}
			for _, k := range e.Elements {
				open, end := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
				if open < 0 || end < open || !strings.HasPrefix(k[open+1:end], "org-") {
					continue
				}
				org := k[open+1 : end]
				if orgsOn[addr] == nil {
					orgsOn[addr] = map[string]bool{}
				}
				if mastersOf[org] == nil {
					mastersOf[org] = map[string]bool{}
				}
				orgsOn[addr][org], mastersOf[org][addr] = true, true
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	if len(mastersOf) != orgs {
		t.Fatalf("counters tagged by %d orgs, want %d: %v", len(mastersOf), orgs, mastersOf)
	}
	for org, masters := range mastersOf {
		if len(masters) != 1 {
			t.Errorf("org %s has counters on %d masters, want one", org, len(masters))
		}
	}
	if len(orgsOn) < 3 {
		t.Fatalf("the %d orgs landed on %d masters, want all three: %v", orgs, len(orgsOn), orgsOn)
	}
	for addr, os := range orgsOn {
		t.Logf("%s: %d orgs", addr, len(os))
	}
}
