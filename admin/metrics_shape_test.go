package admin

import (
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/sluicehq/sluice/gateway"
)

// OpenMetrics names a counter's family without its _total suffix, and a
// histogram's samples _bucket, _sum and _count: no two families may share
// a name that way (sluice_upstream_attempts and
// sluice_upstream_attempts_total once did).
func TestMetrics_OpenMetricsFamiliesDoNotCollide(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	m.Observe(gateway.Event{Route: "chat", Outcome: "admitted", Attempts: 2, Duration: time.Second})
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{} // OpenMetrics family or sample name -> registry family
	claim := func(name, family string) {
		if other, ok := owner[name]; ok && other != family {
			t.Errorf("%s and %s both claim %s", other, family, name)
		}
		owner[name] = family
	}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "sluice_") {
			continue // the Go collector's own go_memstats_alloc_bytes{,_total} are not ours
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			claim(strings.TrimSuffix(name, "_total"), name)
		case dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY:
			claim(name, name)
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				claim(name+s, name)
			}
		default:
			claim(name, name)
		}
	}
	for _, name := range []string{"sluice_upstream_attempts_per_request", "sluice_upstream_attempts"} {
		if _, ok := owner[name]; !ok {
			t.Errorf("no family %s", name)
		}
	}
}

func TestMetrics_BuildInfo(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sluice_build_info" {
			continue
		}
		got := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if v := f.GetMetric()[0].GetGauge().GetValue(); v != 1 {
			t.Errorf("sluice_build_info = %v, want 1", v)
		}
		if got["goversion"] != runtime.Version() || got["version"] == "" || got["revision"] == "" {
			t.Errorf("sluice_build_info labels = %v", got)
		}
		return
	}
	t.Fatal("no sluice_build_info")
}

// Latency buckets reach from milliseconds to minutes: a 40 s generation is
// not lumped with a 10 s one.
func TestMetrics_LatencyBucketsSpanLLMCalls(t *testing.T) {
	m := NewMetrics(MetricsOptions{Models: map[string]string{"m": "m"}, Providers: []string{"p"}})
	m.Observe(gateway.Event{Route: "chat", Model: "m", Provider: "p", Outcome: "admitted", UpstreamStatus: 200, Duration: 40 * time.Second})
	m.Observe(gateway.Event{Route: "chat", Model: "m", Provider: "p", Outcome: "admitted", UpstreamStatus: 200, Duration: 12 * time.Millisecond})
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sluice_request_duration_seconds" {
			continue
		}
		counts := map[float64]uint64{}
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			counts[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		for le, want := range map[float64]uint64{0.01: 0, 0.025: 1, 30: 1, 60: 2, 600: 2} {
			if counts[le] != want {
				t.Errorf("bucket le=%v holds %d, want %d", le, counts[le], want)
			}
		}
		return
	}
	t.Fatal("no sluice_request_duration_seconds")
}

func TestStatusClass(t *testing.T) {
	for status, want := range map[int]string{0: "none", 200: "2xx", 201: "2xx", 429: "4xx", 503: "5xx", 99: "none", 600: "none"} {
		if got := statusClass(status); got != want {
			t.Errorf("statusClass(%d) = %q, want %q", status, got, want)
		}
	}
}
