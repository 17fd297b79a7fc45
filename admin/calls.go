package admin

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluicehq/sluice/catalog"
)

// callQuery reads the filters of GET /admin/v1/calls (and of the console's
// calls page) and scopes them to what p may read: a viewer its own org and
// workspaces.
func callQuery(q url.Values, p *principal) (catalog.CallQuery, error) {
	cq := catalog.CallQuery{KeyID: q.Get("key"), Model: q.Get("model")}
	org := q.Get("org")
	if !p.isAdmin() {
		if org != "" && org != p.org {
			return cq, errorf(http.StatusForbidden, "forbidden", "this token reads org %q only", p.org)
		}
		org = p.org
	}
	cq.Org = org
	ws, err := scopeWorkspace(p, q.Get("workspace"))
	if err != nil {
		return cq, err
	}
	cq.Workspace = ws
	if cq.Since, err = parseDay("since", q.Get("since")); err != nil {
		return cq, err
	}
	if cq.Until, err = parseDay("until", q.Get("until")); err != nil {
		return cq, err
	}
	if s := q.Get("before_id"); s != "" {
		if cq.BeforeID, err = strconv.ParseInt(s, 10, 64); err != nil || cq.BeforeID <= 0 {
			return cq, errorf(http.StatusBadRequest, "invalid", "before_id: want a positive integer, got %q", s)
		}
	}
	cq.Limit, err = limitParam(q, 0, catalog.MaxCallLimit)
	return cq, err
}

// calls answers GET /admin/v1/calls?org=&workspace=&key=&model=&since=&until=&before_id=&limit=:
// the per-call records, newest first.
func (h *Handler) calls(w http.ResponseWriter, r *http.Request, p *principal) error {
	q := r.URL.Query()
	if err := checkParams(q, "org", "workspace", "key", "model", "since", "until", "before_id", "limit"); err != nil {
		return err
	}
	cq, err := callQuery(q, p)
	if err != nil {
		return err
	}
	recs, err := h.cat.Calls(r.Context(), cq)
	if err != nil {
		return err
	}
	out := make([]callOut, 0, len(recs))
	for _, rec := range recs {
		out = append(out, callOut{rec, money(rec.ReservedCost), money(rec.CostMicros)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"calls": out})
	return nil
}

// callOut is a call record as the API writes it: what admission reserved
// and what the call was charged in dollars, as well as in micro-dollars
// (reserved_cost_micros and cost_micros, which clients read before).
type callOut struct {
	catalog.CallRecord
	ReservedDollars money `json:"reserved_cost"`
	CostDollars     money `json:"cost"`
}

// callsPage is the console's list of call records, with the API's filters.
func (c *console) callsPage(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	q := r.URL.Query()
	for k, vs := range q { // an empty filter field of the form means no filter
		if len(vs) == 1 && vs[0] == "" {
			q.Del(k)
		}
	}
	if !p.isAdmin() && q.Get("workspace") == "" && len(p.workspaces) > 1 {
		q.Set("workspace", p.workspaces[0])
	}
	if q.Get("limit") == "" {
		q.Set("limit", "200")
	}
	cq, err := callQuery(q, p)
	if err != nil {
		return 0, "", err
	}
	recs, err := c.h.cat.Calls(r.Context(), cq)
	if err != nil {
		return 0, "", err
	}
	v.Title, v.Nav, v.Data = "Calls", "calls", map[string]any{"Calls": recs, "Query": q}
	return http.StatusOK, "calls", nil
}
