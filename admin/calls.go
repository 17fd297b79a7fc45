package admin

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway/event"
)

// RefusedCall is the call record of a request the gateway answered without
// charging it (a refusal, a failure before the model worked), for the
// calls API and the console's Calls page; pass it to the catalog's
// RecordCall from the gateway's Observer. ok is false for a request
// admitted or charged (its settlement records it) and for one no key was
// known for: a flood of bad keys or bad requests must not cost a database
// write each, and is logged and counted all the same.
func RefusedCall(e event.Event) (_ catalog.CallRecord, ok bool) {
	if e.Outcome == "" || e.Outcome == "admitted" || e.KeyID == "" || !e.Usage.IsZero() {
		return catalog.CallRecord{}, false
	}
	return catalog.CallRecord{RequestID: e.RequestID, Org: e.Org, Workspace: e.Workspace, KeyID: e.KeyID,
		Route: e.Route, Model: e.Model, Provider: e.Provider, Outcome: e.Outcome, SessionID: e.SessionID}, true
}

// callQuery reads the filters of GET /admin/v1/calls (and of the console's
// calls page) and scopes them to what p may read: a viewer its own org and
// workspaces.
func callQuery(q url.Values, p *principal) (catalog.CallQuery, error) {
	cq := catalog.CallQuery{KeyID: q.Get("key"), Model: q.Get("model"), Outcome: q.Get("outcome"), SessionID: q.Get("session")}
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

// calls answers GET /admin/v1/calls?org=&workspace=&key=&model=&session=&outcome=&since=&until=&before_id=&limit=:
// the per-call records, newest first; outcome=refused keeps the refusals,
// session= the calls of one session (a live session's connections and
// responses among them).
func (h *Handler) calls(w http.ResponseWriter, r *http.Request, p *principal) error {
	q := r.URL.Query()
	if err := checkParams(q, "org", "workspace", "key", "model", "session", "outcome", "since", "until", "before_id", "limit"); err != nil {
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

// callOutcomes answers GET /admin/v1/calls/outcomes?org=&workspace=&key=&model=&outcome=&since=&until=:
// how many calls ended with each outcome (settled or refused), by key and
// by workspace.
func (h *Handler) callOutcomes(w http.ResponseWriter, r *http.Request, p *principal) error {
	q := r.URL.Query()
	if err := checkParams(q, "org", "workspace", "key", "model", "outcome", "since", "until"); err != nil {
		return err
	}
	cq, err := callQuery(q, p)
	if err != nil {
		return err
	}
	byKey, byWorkspace, err := outcomeCounts(r, h.cat, cq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"by_key": byKey, "by_workspace": byWorkspace})
	return nil
}

// outcomeCounts returns the outcome counts of the calls cq selects by key,
// and summed by workspace.
func outcomeCounts(r *http.Request, cat *catalog.Catalog, cq catalog.CallQuery) (byKey, byWorkspace []catalog.OutcomeCount, err error) {
	byKey, err = cat.CallOutcomes(r.Context(), cq)
	if err != nil {
		return nil, nil, err
	}
	byKey = append([]catalog.OutcomeCount{}, byKey...) // [] in JSON when none
	byWorkspace = []catalog.OutcomeCount{}
	index := map[catalog.OutcomeCount]int{}
	for _, c := range byKey {
		k := catalog.OutcomeCount{Org: c.Org, Workspace: c.Workspace, Outcome: c.Outcome}
		if i, ok := index[k]; ok {
			byWorkspace[i].Calls += c.Calls
			continue
		}
		index[k] = len(byWorkspace)
		k.Calls = c.Calls
		byWorkspace = append(byWorkspace, k)
	}
	slices.SortFunc(byWorkspace, func(a, b catalog.OutcomeCount) int {
		return cmp.Or(cmp.Compare(a.Org, b.Org), cmp.Compare(a.Workspace, b.Workspace), cmp.Compare(a.Outcome, b.Outcome))
	})
	return byKey, byWorkspace, nil
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
	// The counts read today's records unless the filter names a start,
	// so that the page never groups months of records on each load.
	if cq.Since.IsZero() {
		cq.Since = c.today().Truncate(24 * time.Hour)
	}
	byKey, byWorkspace, err := outcomeCounts(r, c.h.cat, cq)
	if err != nil {
		return 0, "", err
	}
	v.Title, v.Nav, v.Data = "Calls", "calls", map[string]any{"Calls": recs, "Query": q, "Outcomes": knownCallOutcomes,
		"CountsSince": cq.Since, "ByKey": byKey, "ByWorkspace": byWorkspace}
	return http.StatusOK, "calls", nil
}

// knownCallOutcomes are the outcomes the console's filter offers: refused
// (every refusal), the settled calls', then the refusals' (the outcomes of
// sluice_requests_total but admitted).
var knownCallOutcomes = append([]string{catalog.OutcomeRefused, catalog.OutcomeReported, catalog.OutcomeEstimated, catalog.OutcomeSwept, catalog.OutcomeCacheHit},
	slices.DeleteFunc(slices.Clone(knownOutcomes), func(o string) bool { return o == "admitted" })...)
