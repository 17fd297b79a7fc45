package admin

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway/event"
)

func TestMetrics_LiveConnectionsAndTheirCloses(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	open := 2
	m.LiveConnections(func() int { return open })
	m.Observe(event.Event{Route: "realtime", Model: "m", Outcome: "admitted", Status: 101, LiveClose: 1011, LiveCause: "ceiling", LiveSeconds: 90 * time.Second})
	m.Observe(event.Event{Route: "realtime", Model: "m", Outcome: "admitted", Status: 101, LiveClose: 1001, LiveCause: "client_gone", LiveSeconds: 30 * time.Second})
	m.Observe(event.Event{Route: "realtime", Model: "m", Outcome: "admitted", Status: 200}) // a response: no close
	f := scrapeHandler(t, m.Handler())
	if got := f["sluice_live_connections"].GetMetric()[0].GetGauge().GetValue(); got != 2 {
		t.Fatalf("live connections %v, want 2", got)
	}
	if got := f["sluice_live_seconds_total"].GetMetric()[0].GetCounter().GetValue(); got != 120 {
		t.Fatalf("live seconds %v, want 120", got)
	}
	closes := map[string]float64{}
	for _, s := range f["sluice_live_closes_total"].GetMetric() {
		var code, cause string
		for _, l := range s.GetLabel() {
			switch l.GetName() {
			case "code":
				code = l.GetValue()
			case "cause":
				cause = l.GetValue()
			}
		}
		closes[code+" "+cause] = s.GetCounter().GetValue()
	}
	if len(closes) != 2 || closes["1011 ceiling"] != 1 || closes["1001 client_gone"] != 1 {
		t.Fatalf("closes %v", closes)
	}
	for _, s := range f["sluice_requests_total"].GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "route" && l.GetValue() != "realtime" {
				t.Fatalf("route label %q, want realtime", l.GetValue())
			}
		}
	}
}
