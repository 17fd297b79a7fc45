package admin

import (
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// workspaceSummary is a row of the workspaces page.
type workspaceSummary struct {
	Name   string
	Today  catalog.UsageRow
	Limits []limitView
}

// workspaceLimits returns the limits that apply to a whole workspace: the
// rules counted per workspace (or wider), not per user or key in it.
func (c *console) workspaceLimits(r *http.Request, org, ws string) ([]limitView, error) {
	limits, err := c.h.limitsOf(r.Context(), sluice.Identity{Org: org, Workspace: ws})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(limits, func(l limitView) bool {
		return l.Subject != "workspace" && l.Subject != "global"
	}), nil
}

// orgOf is the org the console shows: a viewer's own; for an admin the one
// ?org= names, "default" when none.
func orgOf(r *http.Request, p *principal) string {
	if !p.isAdmin() {
		return p.org
	}
	return cmp.Or(r.URL.Query().Get("org"), sluice.DefaultOrg)
}

func (c *console) visibleWorkspaces(r *http.Request, p *principal) ([]string, error) {
	all, err := c.h.cat.Workspaces(r.Context(), orgOf(r, p))
	if err != nil {
		return nil, err
	}
	if p.isAdmin() {
		return all, nil
	}
	return slices.DeleteFunc(all, func(ws string) bool { return !p.canRead(ws) }), nil
}

func (c *console) today() time.Time { return c.h.now().UTC() }

func (c *console) workspaces(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	names, err := c.visibleWorkspaces(r, p)
	if err != nil {
		return 0, "", err
	}
	today := c.today()
	rows, err := c.h.cat.Usage(r.Context(), catalog.UsageQuery{Org: orgOf(r, p), From: today, To: today, GroupBy: []string{"workspace"}})
	if err != nil {
		return 0, "", err
	}
	var out []workspaceSummary
	for _, ws := range names {
		s := workspaceSummary{Name: ws}
		for _, row := range rows {
			if row.Workspace == ws {
				s.Today = row
			}
		}
		if s.Limits, err = c.workspaceLimits(r, orgOf(r, p), ws); err != nil {
			return 0, "", err
		}
		out = append(out, s)
	}
	v.Title, v.Nav, v.Data = "Workspaces", "workspaces", map[string]any{"Workspaces": out, "Day": today.Format(time.DateOnly)}
	return http.StatusOK, "workspaces", nil
}

// chart is an inline SVG bar chart of one figure per day: tokens or cost.
type chart struct {
	// Metric is tokens or cost: it names the chart and formats its figures.
	Metric        string
	Width, Height int
	Bars          []chartBar
	Max           int64
	Total         int64
	First, Last   string
}

type chartBar struct {
	X, Y, W, H int
	Day        string
	Tokens     int64
	Cost       int64
}

const chartDays = 30

// lastDays sums the usage q selects (its days and grouping aside) on each
// of the last chartDays UTC days, oldest first; a day without usage is a
// row of zeros.
func (c *console) lastDays(r *http.Request, q catalog.UsageQuery) ([]catalog.UsageRow, error) {
	end := c.today()
	start := end.AddDate(0, 0, -(chartDays - 1))
	q.From, q.To, q.GroupBy = start, end, []string{"day"}
	rows, err := c.h.cat.Usage(r.Context(), q)
	if err != nil {
		return nil, err
	}
	byDay := map[string]catalog.UsageRow{}
	for _, row := range rows {
		byDay[row.Day] = row
	}
	days := make([]catalog.UsageRow, chartDays)
	for i := range days {
		day := start.AddDate(0, 0, i).Format(time.DateOnly)
		days[i] = byDay[day]
		days[i].Day = day
	}
	return days, nil
}

// dayTokens is what the charts count as a day's tokens: input and output,
// as the workspaces page does.
func dayTokens(row catalog.UsageRow) int64 { return row.InputTokens + row.OutputTokens }

// usageCharts draws days (from lastDays) twice: tokens per day, and cost
// in dollars per day.
func usageCharts(days []catalog.UsageRow) []chart {
	return []chart{
		barChart(string(sluice.MetricTokens), days, dayTokens),
		barChart(string(sluice.MetricCost), days, func(row catalog.UsageRow) int64 { return row.CostMicros }),
	}
}

func barChart(metric string, days []catalog.UsageRow, value func(catalog.UsageRow) int64) chart {
	ch := chart{Metric: metric, Width: 720, Height: 180}
	if len(days) == 0 {
		return ch
	}
	ch.First, ch.Last = days[0].Day, days[len(days)-1].Day
	for _, row := range days {
		ch.Max = max(ch.Max, value(row))
		ch.Total += value(row)
	}
	slot := ch.Width / len(days)
	for i, row := range days {
		v, h := value(row), 0
		if ch.Max > 0 {
			h = int(float64(v) / float64(ch.Max) * float64(ch.Height-20))
		}
		if v > 0 && h < 2 {
			h = 2
		}
		ch.Bars = append(ch.Bars, chartBar{X: i*slot + 2, Y: ch.Height - h, W: slot - 4, H: h, Day: row.Day,
			Tokens: dayTokens(row), Cost: row.CostMicros})
	}
	return ch
}

func (c *console) workspace(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	ws := r.PathValue("ws")
	if !p.canRead(ws) {
		return 0, "", forbiddenWorkspace(ws)
	}
	return c.renderWorkspace(r, p, v, ws, http.StatusOK)
}

func (c *console) renderWorkspace(r *http.Request, p *principal, v *view, ws string, status int) (int, string, error) {
	if ok, err := c.h.cat.SubjectExists(r.Context(), "workspace", ws); err != nil {
		return 0, "", err
	} else if !ok {
		return 0, "", errorf(http.StatusNotFound, "unknown_subject", "no key has workspace %q", ws)
	}
	org := orgOf(r, p)
	limits, err := c.workspaceLimits(r, org, ws)
	if err != nil {
		return 0, "", err
	}
	days, err := c.lastDays(r, catalog.UsageQuery{Org: org, Workspace: ws})
	if err != nil {
		return 0, "", err
	}
	all, err := c.h.visibleOverrides(r.Context(), p)
	if err != nil {
		return 0, "", err
	}
	overrides := slices.DeleteFunc(all, func(o catalog.Override) bool { return o.Attribute != "workspace" || o.Value != ws || o.Org != org })
	var ruleNames []string
	for _, rule := range c.h.limiter.Policy().Rules {
		ruleNames = append(ruleNames, rule.Name)
	}
	if n := r.URL.Query().Get("saved"); n != "" && v.Error == "" {
		v.Notice = "Override saved for rule " + n + "; it applies from the next request."
	}
	v.Title, v.Nav = "Workspace "+ws, "workspaces"
	v.Data = map[string]any{"Workspace": ws, "Limits": limits, "Charts": usageCharts(days), "Overrides": overrides, "Rules": ruleNames}
	return status, "workspace", nil
}

// overrideForm reads the override form: an empty limit or burst inherits,
// 0 disables; on a cost rule (cost) they are dollars ("500", "$12.50"),
// else whole numbers; an expiry is a UTC date and time.
func overrideForm(r *http.Request, org, ws string, cost bool) (overrideRequest, error) {
	req := overrideRequest{Rule: r.PostFormValue("rule"), Org: org, Attribute: "workspace", Value: ws}
	for _, f := range []struct {
		name string
		dst  *json.RawMessage
	}{{"limit", &req.Limit}, {"burst", &req.Burst}} {
		s := strings.TrimSpace(r.PostFormValue(f.name))
		switch {
		case s == "":
			continue
		case cost:
			// A string is read as dollars, never as the micro-dollars a
			// bare number once meant.
			*f.dst, _ = json.Marshal(s)
			continue
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
		if err != nil {
			return req, errorf(http.StatusBadRequest, "invalid", "%s: want a whole number (empty inherits, 0 disables), got %q", f.name, s)
		}
		*f.dst = strconv.AppendInt(nil, n, 10)
	}
	if s := strings.TrimSpace(r.PostFormValue("expires_at")); s != "" {
		t, err := time.Parse("2006-01-02T15:04", s)
		if err != nil {
			return req, errorf(http.StatusBadRequest, "invalid", "expires: want a date and time, got %q", s)
		}
		req.ExpiresAt = t.UTC()
	}
	return req, nil
}

func (c *console) setOverride(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	ws := r.PathValue("ws")
	req, err := overrideForm(r, orgOf(r, p), ws, c.h.ruleIsCost(r.PostFormValue("rule")))
	if err == nil {
		_, err = c.h.setOverrideFrom(r.Context(), req, p.actor)
	}
	if err != nil {
		ae := errorOf(err)
		if ae.Status >= 500 {
			return 0, "", err
		}
		v.Error = ae.Message
		return c.renderWorkspace(r, p, v, ws, ae.Status)
	}
	http.Redirect(w, r, "/ui/workspaces/"+url.PathEscape(ws)+"?saved="+url.QueryEscape(req.Rule), http.StatusSeeOther)
	return 0, "", nil
}

func (c *console) deleteOverride(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	ws := r.PathValue("ws")
	o := catalog.Override{Rule: r.PostFormValue("rule"), Org: orgOf(r, p), Attribute: "workspace", Value: ws}
	if err := c.h.cat.DeleteOverride(r.Context(), o, p.actor); err != nil {
		return 0, "", err
	}
	c.h.changed()
	http.Redirect(w, r, "/ui/workspaces/"+url.PathEscape(ws), http.StatusSeeOther)
	return 0, "", nil
}

// ruleRow is a rule in force as the rules page shows it: with the
// overrides of it the viewer may read, and what its match selects.
type ruleRow struct {
	policyRule
	// Overrides counts the rule's overrides; a rule with a limit of 0 and
	// overrides (a per-key rule made for keys' own limits) binds the
	// subjects they name and no other.
	Overrides int
	// Match says which calls the rule counts: "models a, b; tiers t"; ""
	// for every call.
	Match string
}

// matchText writes a rule's match for people; "" when it matches every
// call.
func matchText(m sluice.Match) string {
	var parts []string
	for _, f := range []struct {
		name   string
		values []string
	}{{"models", m.Models}, {"tiers", m.Tiers}, {"routes", m.Routes}} {
		if len(f.values) > 0 {
			parts = append(parts, f.name+" "+strings.Join(f.values, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

func (c *console) rules(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	overrides, err := c.h.visibleOverrides(r.Context(), p)
	if err != nil {
		return 0, "", err
	}
	counts := map[string]int{}
	for _, o := range overrides {
		counts[o.Rule]++
	}
	var rates, budgets []ruleRow
	for _, rule := range c.h.policyRules() {
		row := ruleRow{policyRule: rule, Overrides: counts[rule.Name], Match: matchText(rule.Match)}
		if rule.Kind == sluice.KindBudget {
			budgets = append(budgets, row)
		} else {
			rates = append(rates, row)
		}
	}
	v.Title, v.Nav, v.Data = "Rules and budgets", "rules", map[string]any{"Rules": rates, "Budgets": budgets}
	return http.StatusOK, "rules", nil
}

func (c *console) overrides(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	list, err := c.h.visibleOverrides(r.Context(), p)
	if err != nil {
		return 0, "", err
	}
	v.Title, v.Nav, v.Data = "Overrides", "overrides", list
	return http.StatusOK, "overrides", nil
}

func (c *console) reservations(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	if !p.isAdmin() {
		return 0, "", errorf(http.StatusForbidden, "forbidden", "open reservations span workspaces: an admin token is needed")
	}
	list := ReservationList{Source: FromProcess}
	if c.h.opts.Metrics != nil {
		var err error
		if list, err = c.h.opts.Metrics.Reservations(r.Context(), c.h.now(), maxReservations, c.h.limiter.RuleOf); err != nil {
			return 0, "", err
		}
	}
	v.Title, v.Nav, v.Data = "Open reservations", "reservations", list
	return http.StatusOK, "reservations", nil
}

func (c *console) circuitsPage(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	list := []Circuit{}
	if c.h.opts.Circuits != nil {
		list = append(list, c.h.opts.Circuits()...)
	}
	slices.SortFunc(list, func(a, b Circuit) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Model, b.Model))
	})
	v.Title, v.Nav, v.Data = "Circuits", "circuits", list
	return http.StatusOK, "circuits", nil
}

func (c *console) sessionsPage(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	list, err := c.h.cat.ListSessions(r.Context(), "", true, 200)
	if err != nil {
		return 0, "", err
	}
	visible := list[:0]
	for _, s := range list {
		if p.canReadIn(s.Org, s.Workspace) {
			visible = append(visible, s)
		}
	}
	var live []LiveConnection
	if c.h.opts.Live != nil {
		for _, lc := range c.h.opts.Live() {
			if p.canReadIn(lc.Org, lc.Workspace) {
				live = append(live, lc)
			}
		}
	}
	v.Title, v.Nav, v.Data = "Sessions", "sessions", map[string]any{"Sessions": visible, "Live": live}
	if ended := r.URL.Query().Get("ended"); ended != "" {
		v.Notice = "Session " + ended + " ended."
	}
	return http.StatusOK, "sessions", nil
}

func (c *console) endSessionForm(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	if !p.isAdmin() {
		return 0, "", errorf(http.StatusForbidden, "forbidden", "ending a session needs an admin token")
	}
	s, err := c.h.endSessionAs(r.Context(), r.PathValue("id"), p.actor)
	if err != nil {
		return 0, "", err
	}
	http.Redirect(w, r, "/ui/sessions?ended="+url.QueryEscape(s.ID), http.StatusSeeOther)
	return 0, "", nil
}
