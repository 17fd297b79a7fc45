package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

func TestResolve_LaterLayerReplacesByName(t *testing.T) {
	rule := func(name string, limit int64) sluice.Rule {
		return sluice.Rule{Name: name, Kind: sluice.KindRate, Subject: "key", Limit: limit, Window: time.Minute}
	}
	tests := []struct {
		name   string
		layers []config.Layer
		want   []sluice.Rule // Name, Limit and Source
	}{
		{"nothing", nil, nil},
		{"one layer keeps its order and gets its source",
			[]config.Layer{{Source: "default", Rules: []sluice.Rule{rule("b", 1), rule("a", 2)}}},
			[]sluice.Rule{{Name: "b", Limit: 1, Source: "default"}, {Name: "a", Limit: 2, Source: "default"}}},
		{"later replaces earlier in place",
			[]config.Layer{
				{Source: "default", Rules: []sluice.Rule{rule("rate", 20), rule("budget", 2_000_000), rule("inflight", 16)}},
				{Source: "config", Rules: []sluice.Rule{rule("budget", 500), rule("extra", 7)}},
				{Source: "env", Rules: []sluice.Rule{rule("rate", 0)}},
				{Source: "rule", Rules: []sluice.Rule{rule("extra", 8)}},
			},
			[]sluice.Rule{
				{Name: "rate", Limit: 0, Source: "env"},
				{Name: "budget", Limit: 500, Source: "config"},
				{Name: "inflight", Limit: 16, Source: "default"},
				{Name: "extra", Limit: 8, Source: "rule"},
			}},
		{"a rule's own source is overwritten",
			[]config.Layer{{Source: "config", Rules: []sluice.Rule{{Name: "x", Source: "made up"}}}},
			[]sluice.Rule{{Name: "x", Source: "config"}}},
		{"empty layers change nothing",
			[]config.Layer{{Source: "default", Rules: []sluice.Rule{rule("a", 1)}}, {Source: "config"}},
			[]sluice.Rule{{Name: "a", Limit: 1, Source: "default"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := config.Resolve(tt.layers...)
			var short []sluice.Rule
			for _, r := range got {
				short = append(short, sluice.Rule{Name: r.Name, Limit: r.Limit, Source: r.Source})
			}
			if !reflect.DeepEqual(short, tt.want) {
				t.Fatalf("Resolve = %+v, want %+v", short, tt.want)
			}
		})
	}
}

func TestResolve_DoesNotModifyLayers(t *testing.T) {
	layer := config.Layer{Source: "config", Rules: []sluice.Rule{{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute}}}
	config.Resolve(layer)
	if layer.Rules[0].Source != "" {
		t.Fatalf("Resolve wrote %q into its input", layer.Rules[0].Source)
	}
}
