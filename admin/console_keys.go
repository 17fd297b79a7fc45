package admin

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/catalog"
)

// keyState says whether a key works: active, expired or revoked.
func keyState(k catalog.Key, now time.Time) string {
	switch {
	case !k.RevokedAt.IsZero():
		return "revoked"
	case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
		return "expired"
	}
	return "active"
}

// keyRow is a row of the keys page.
type keyRow struct {
	catalog.Key
	State string
}

// keysPage lists the keys of the org the console shows that p may read,
// oldest first, revoked ones included; ?workspace= keeps one workspace's.
func (c *console) keysPage(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	ws := r.URL.Query().Get("workspace")
	if ws != "" && !p.canRead(ws) {
		return 0, "", forbiddenWorkspace(ws)
	}
	all, err := c.h.cat.ListKeys(r.Context(), ws)
	if err != nil {
		return 0, "", err
	}
	org, now := orgOf(r, p), c.h.now()
	var rows []keyRow
	for _, k := range all {
		if k.Org == org && p.canReadIn(k.Org, k.Workspace) {
			rows = append(rows, keyRow{Key: k, State: keyState(k, now)})
		}
	}
	v.Title, v.Nav, v.Data = "Keys", "keys", map[string]any{"Keys": rows, "Workspace": ws}
	return http.StatusOK, "keys", nil
}

// ownLimit is one of a key's own limits (an override of a rule for the
// key alone), with the metric of its rule to say the amount in.
type ownLimit struct {
	catalog.Override
	Metric string
}

// keyView is what the key page shows.
type keyView struct {
	Key   catalog.Key
	State string
	// Spend is the days of the last chartDays on which the key was charged,
	// newest first.
	Spend  []catalog.UsageRow
	Charts []chart
	// SpendScope says whose spend is shown when it is not all of it.
	SpendScope string
	Own        []ownLimit
	Limits     []limitView
}

// keyPage shows one key: its record (never its secret), what it spent on
// each of the last 30 days, its own limits and every limit that applies to
// it with its live headroom, read without charging.
func (c *console) keyPage(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	k, err := c.h.cat.GetKey(r.Context(), r.PathValue("id"))
	if err != nil {
		return 0, "", err
	}
	if !p.canReadIn(k.Org, k.Workspace) {
		return 0, "", forbiddenWorkspace(k.Workspace)
	}
	page := keyView{Key: k, State: keyState(k, c.h.now())}
	q := catalog.UsageQuery{Org: k.Org, Key: k.ID}
	if !p.isAdmin() {
		// What a service key spent in a workspace it asserts belongs to that
		// workspace, which this viewer may not read.
		q.Workspace = k.Workspace
		page.SpendScope = "in workspace " + k.Workspace
	}
	days, err := c.lastDays(r, q)
	if err != nil {
		return 0, "", err
	}
	page.Charts = usageCharts(days)
	for i := len(days) - 1; i >= 0; i-- {
		if d := days[i]; d.Requests > 0 || d.Tokens > 0 || d.CostMicros > 0 {
			page.Spend = append(page.Spend, d)
		}
	}
	overrides, err := c.h.cat.ListOverrides(r.Context())
	if err != nil {
		return 0, "", err
	}
	metricOf := map[string]string{}
	for _, rule := range c.h.limiter.Policy().Rules {
		// An org's own rule replaces the deployment's of its name.
		if _, seen := metricOf[rule.Name]; rule.Org == k.Org || (rule.Org == "" && !seen) {
			metricOf[rule.Name] = string(rule.Metric)
		}
	}
	for _, o := range overrides {
		if o.Attribute == "key" && o.Value == k.ID {
			page.Own = append(page.Own, ownLimit{Override: o, Metric: metricOf[o.Rule]})
		}
	}
	if page.Limits, err = c.h.limitsOf(r.Context(), keyIdentity(k)); err != nil {
		return 0, "", err
	}
	v.Title, v.Nav, v.Data = "Key "+k.ID, "keys", page
	if k.Name != "" {
		v.Title = "Key " + k.Name
	}
	return http.StatusOK, "key", nil
}
