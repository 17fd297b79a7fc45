package admin

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
)

// HeadroomWorkspace names a workspace whose per-workspace rules get
// headroom gauges.
type HeadroomWorkspace struct{ Org, Workspace string }

// headroomTimeout bounds the store reads of one scrape.
const headroomTimeout = 2 * time.Second

// WatchHeadroom exports, read at each scrape, the limit and the room left
// of the rules on the whole deployment (subject global or server, one
// series per model a rule matches) and of the per-workspace rules of the
// listed workspaces: sluice_headroom_limit and sluice_headroom_remaining,
// labelled rule, kind, metric, model, org and workspace. No other
// subject's headroom is exported: the label set stays bounded by the
// policy and the list. A store that does not answer leaves the gauges out
// of that scrape (its error is counted in sluice_store_errors_total).
func (m *Metrics) WatchHeadroom(l *sluice.Limiter, workspaces []HeadroomWorkspace) {
	m.reg.MustRegister(&headroomCollector{l: l, workspaces: slices.Clone(workspaces)})
}

var (
	headroomLabels    = []string{"rule", "kind", "metric", "model", "org", "workspace"}
	headroomLimitDesc = prometheus.NewDesc("sluice_headroom_limit",
		"The effective limit of a rule on the whole deployment or on a listed workspace (a rate rule's burst; overrides and tiers applied).", headroomLabels, nil)
	headroomRemainingDesc = prometheus.NewDesc("sluice_headroom_remaining",
		"The room left under sluice_headroom_limit now (settled and reserved usage counted).", headroomLabels, nil)
)

type headroomCollector struct {
	l          *sluice.Limiter
	workspaces []HeadroomWorkspace
}

func (c *headroomCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- headroomLimitDesc
	ch <- headroomRemainingDesc
}

// headroomQuery is one identity to read and the rules of its answer to
// export, with the labels they get.
type headroomQuery struct {
	id         sluice.Identity
	rules      map[string]bool
	model      string
	org, space string
}

func (c *headroomCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), headroomTimeout)
	defer cancel()
	for _, q := range c.queries() {
		eff, err := c.l.Effective(ctx, q.id)
		if err != nil {
			continue
		}
		for _, e := range eff {
			if !q.rules[e.Rule] {
				continue
			}
			limit := e.Limit
			if e.Kind == sluice.KindRate && e.Burst > 0 {
				limit = e.Burst
			}
			labels := []string{e.Rule, string(e.Kind), string(e.Metric), q.model, q.org, q.space}
			ch <- prometheus.MustNewConstMetric(headroomLimitDesc, prometheus.GaugeValue, float64(limit), labels...)
			ch <- prometheus.MustNewConstMetric(headroomRemainingDesc, prometheus.GaugeValue, float64(e.Remaining), labels...)
		}
	}
}

// queries lists what to read for the policy in force: the deployment's
// rules without a match once, those matching models once per model, and
// the listed workspaces' rules on subject workspace. Rules matching a
// route or a tier belong to no one identity and are left out.
func (c *headroomCollector) queries() []headroomQuery {
	whole := headroomQuery{rules: map[string]bool{}}
	perModel := map[string]*headroomQuery{}
	workspaceRules := map[string]bool{}
	for _, r := range c.l.Policy().Rules {
		if r.Disabled || r.Limit == 0 || len(r.Match.Tiers) > 0 || len(r.Match.Routes) > 0 {
			continue
		}
		switch r.Subject {
		case "global", "server":
			if len(r.Match.Models) == 0 {
				whole.rules[r.Name] = true
				continue
			}
			for _, model := range r.Match.Models {
				q := perModel[model]
				if q == nil {
					q = &headroomQuery{id: sluice.Identity{Model: model}, rules: map[string]bool{}, model: model}
					perModel[model] = q
				}
				q.rules[r.Name] = true
			}
		case "workspace":
			if len(r.Match.Models) == 0 {
				workspaceRules[r.Name] = true
			}
		}
	}
	var out []headroomQuery
	if len(whole.rules) > 0 {
		out = append(out, whole)
	}
	for _, model := range slices.Sorted(maps.Keys(perModel)) {
		out = append(out, *perModel[model])
	}
	if len(workspaceRules) > 0 {
		for _, w := range c.workspaces {
			out = append(out, headroomQuery{id: sluice.Identity{Org: w.Org, Workspace: w.Workspace}, rules: workspaceRules,
				org: w.Org, space: w.Workspace})
		}
	}
	return out
}
