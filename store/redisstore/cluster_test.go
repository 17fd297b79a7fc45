package redisstore_test

import (
	"sync/atomic"
	"testing"

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
