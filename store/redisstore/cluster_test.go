package redisstore_test

import (
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
