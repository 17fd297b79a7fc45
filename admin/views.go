package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// checkParams refuses query parameters outside allowed, so that a typo is
// an error rather than a silently wider answer.
func checkParams(q url.Values, allowed ...string) error {
	for name := range q {
		if !slices.Contains(allowed, name) {
			return errorf(http.StatusBadRequest, "unknown_parameter", "unknown query parameter %q (want %s)", name, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// limitParam reads the limit query parameter: an integer from 1 to most,
// def when it is absent.
func limitParam(q url.Values, def, most int) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > most {
		return 0, errorf(http.StatusBadRequest, "invalid", "limit: want an integer from 1 to %d, got %q", most, s)
	}
	return n, nil
}

// scopeWorkspace returns the workspace a request reads: ws as given for an
// admin; for a viewer, ws when it is in scope (403 otherwise), or its one
// workspace when ws is empty.
func scopeWorkspace(p *principal, ws string) (string, error) {
	if p.isAdmin() {
		return ws, nil
	}
	if ws == "" {
		if len(p.workspaces) == 1 {
			return p.workspaces[0], nil
		}
		return "", errorf(http.StatusBadRequest, "workspace_required", "name a workspace: this token reads %s", strings.Join(p.workspaces, ", "))
	}
	if !p.canRead(ws) {
		return "", forbiddenWorkspace(ws)
	}
	return ws, nil
}

// identityOf builds the identity the query names. With key, the identity
// is the key's record (its workspace, user, team, org and tier), as the
// gateway would build it; a workspace or user that contradicts the key is
// refused.
func (h *Handler) identityOf(ctx context.Context, q url.Values, p *principal) (sluice.Identity, error) {
	if err := checkParams(q, "workspace", "user", "key", "org", "team", "tier", "model", "route"); err != nil {
		return sluice.Identity{}, err
	}
	id := sluice.Identity{Org: q.Get("org"), Workspace: q.Get("workspace"), Team: q.Get("team"), User: q.Get("user"),
		Tier: q.Get("tier"), Model: q.Get("model"), Route: q.Get("route")}
	if !p.isAdmin() {
		// A viewer looks at its own org's subjects only.
		if id.Org != "" && id.Org != p.org {
			return sluice.Identity{}, errorf(http.StatusForbidden, "forbidden", "this token reads org %q only", p.org)
		}
		id.Org = p.org
	}
	if keyID := q.Get("key"); keyID != "" {
		k, err := h.cat.GetKey(ctx, keyID)
		if err != nil {
			return sluice.Identity{}, err
		}
		for _, f := range []struct{ name, asked, has string }{
			{"workspace", id.Workspace, k.Workspace}, {"user", id.User, k.User}, {"org", id.Org, k.Org}, {"team", id.Team, k.Team},
		} {
			if f.asked != "" && f.asked != f.has {
				if !p.canReadIn(k.Org, k.Workspace) {
					return sluice.Identity{}, forbiddenWorkspace(f.asked)
				}
				return sluice.Identity{}, errorf(http.StatusBadRequest, "invalid", "key %s has %s %q, not %q", k.ID, f.name, f.has, f.asked)
			}
		}
		if !p.canReadIn(k.Org, k.Workspace) {
			return sluice.Identity{}, forbiddenWorkspace(k.Workspace)
		}
		model, route := id.Model, id.Route
		id = keyIdentity(k)
		id.Model, id.Route = model, route
	}
	ws, err := scopeWorkspace(p, id.Workspace)
	if err != nil {
		return sluice.Identity{}, err
	}
	id.Workspace = ws
	return id, nil
}

// keyIdentity is the identity of a request made with key k, as the
// gateway builds it from the key's record.
func keyIdentity(k catalog.Key) sluice.Identity {
	return sluice.Identity{Org: k.Org, Workspace: k.Workspace, Team: k.Team, User: k.User, Tier: k.Tier, Key: k.ID}
}

// limitView is one limit that applies to a subject, where it came from,
// and its live headroom.
type limitView struct {
	Rule    string `json:"rule"`
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Metric  string `json:"metric"`
	Limit   int64  `json:"limit"`
	Burst   int64  `json:"burst,omitempty"`
	Window  string `json:"window,omitempty"`
	Period  string `json:"period,omitempty"`
	// Source is default, config, env, rule, override, tier, simple, or
	// provider (what the provider allows, from its rate-limit headers).
	Source string `json:"source"`
	Mode   string `json:"mode"`
	// Used counts usage settled and reserved.
	Used int64 `json:"used"`
	// Reserved is the part of Used held by calls in flight, on every
	// replica sharing the store (a budget's open reservations; a
	// concurrency rule's leases); absent for rate rules, and for budgets
	// when the server does not track reservations.
	Reserved  *int64    `json:"reserved,omitempty"`
	Remaining int64     `json:"remaining"`
	ResetAt   time.Time `json:"reset_at,omitzero"`
}

// MarshalJSON writes the view; a cost rule's amounts in dollars ("$500"),
// as the rule API writes its limit.
func (v limitView) MarshalJSON() ([]byte, error) {
	type plain limitView
	if v.Metric != string(sluice.MetricCost) {
		return json.Marshal(plain(v))
	}
	return json.Marshal(struct {
		plain
		Limit     money  `json:"limit"`
		Burst     money  `json:"burst,omitempty"`
		Used      money  `json:"used"`
		Reserved  *money `json:"reserved,omitempty"`
		Remaining money  `json:"remaining"`
	}{plain(v), money(v.Limit), money(v.Burst), money(v.Used), moneyPtr(v.Reserved), money(v.Remaining)})
}

// usageOut is a usage row as the API writes it: its cost in dollars as
// well as in micro-dollars (cost_micros, which clients read before).
type usageOut struct {
	catalog.UsageRow
	Cost money `json:"cost"`
}

// limitsOf returns the limits that apply to id now.
func (h *Handler) limitsOf(ctx context.Context, id sluice.Identity) ([]limitView, error) {
	var keys []sluice.CounterKey
	if h.opts.Metrics != nil {
		ctx = withPeekCapture(ctx, &keys)
	}
	eff, err := h.limiter.Effective(ctx, id)
	if err != nil {
		var tooLarge *sluice.TooLargeError
		if errors.As(err, &tooLarge) {
			return nil, errorf(http.StatusBadRequest, "invalid", "%v", err)
		}
		return nil, err
	}
	byName := map[string]sluice.Rule{}
	for _, r := range h.limiter.Policy().Rules {
		byName[r.Name] = r
	}
	// What budgets hold in open reservations, read in one call for all.
	var budgetKeys []sluice.CounterKey
	var budgetAt []int
	if len(keys) == len(eff) {
		for i, e := range eff {
			if e.Kind == sluice.KindBudget {
				budgetKeys, budgetAt = append(budgetKeys, keys[i]), append(budgetAt, i)
			}
		}
	}
	reserved := map[int]int64{}
	if len(budgetKeys) > 0 {
		got, err := h.opts.Metrics.reservedOf(ctx, budgetKeys)
		if err != nil {
			return nil, err
		}
		for j, i := range budgetAt {
			reserved[i] = got[j]
		}
	}
	out := make([]limitView, 0, len(eff))
	for i, e := range eff {
		v := limitView{Rule: e.Rule, Kind: string(e.Kind), Subject: e.Subject, Metric: string(e.Metric), Limit: e.Limit,
			Burst: e.Burst, Source: e.Source, Mode: string(e.Mode), Used: e.Used, Remaining: e.Remaining, ResetAt: e.ResetAt}
		if r, ok := byName[e.Rule]; ok {
			if r.Window > 0 {
				v.Window = r.Window.String()
			}
			v.Period = string(r.Period)
		}
		switch {
		case e.Kind == sluice.KindConcurrency:
			// A lease is held by a call in flight, on whichever replica.
			leases := e.Used
			v.Reserved = &leases
		case e.Kind == sluice.KindBudget && len(keys) == len(eff):
			r := reserved[i]
			v.Reserved = &r
		}
		out = append(out, v)
	}
	return out, nil
}

func (h *Handler) effective(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := h.identityOf(r.Context(), r.URL.Query(), p)
	if err != nil {
		return err
	}
	limits, err := h.limitsOf(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"identity": identityView(id), "limits": limits})
	return nil
}

// listBudgets answers GET /admin/v1/budgets: the budgets that apply to the
// subject, with live usage, reserved amount, remaining and reset time. A
// query that names no subject is refused: every per-subject budget would
// read as a row of zeros for the empty subject.
func (h *Handler) listBudgets(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := h.identityOf(r.Context(), r.URL.Query(), p)
	if err != nil {
		return err
	}
	if id.Workspace == "" && id.User == "" && id.Team == "" && id.Key == "" && r.URL.Query().Get("org") == "" {
		return errorf(http.StatusBadRequest, "subject_required", "name a subject: workspace, user, team, key or org (for example ?workspace=acme)")
	}
	limits, err := h.limitsOf(r.Context(), id)
	if err != nil {
		return err
	}
	budgets := slices.DeleteFunc(limits, func(l limitView) bool { return l.Kind != string(sluice.KindBudget) })
	writeJSON(w, http.StatusOK, map[string]any{"identity": identityView(id), "budgets": budgets})
	return nil
}

func identityView(id sluice.Identity) map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{"org": id.Org, "workspace": id.Workspace, "team": id.Team, "user": id.User,
		"key": id.Key, "tier": id.Tier, "model": id.Model, "route": id.Route} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// parseDay reads a date (2006-01-02) or an RFC 3339 time.
func parseDay(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, errorf(http.StatusBadRequest, "invalid", "%s: want a date (2006-01-02) or an RFC 3339 time, got %q", name, s)
}

// usage answers GET /admin/v1/usage?org=&workspace=&key=&from=&to=&group_by=org,workspace,day,route,model,key,user,team,tag,kind.
// A viewer reads its own org's workspaces only.
func (h *Handler) usage(w http.ResponseWriter, r *http.Request, p *principal) error {
	q := r.URL.Query()
	if err := checkParams(q, "org", "workspace", "key", "from", "to", "group_by"); err != nil {
		return err
	}
	org := q.Get("org")
	if !p.isAdmin() {
		if org != "" && org != p.org {
			return errorf(http.StatusForbidden, "forbidden", "this token reads org %q only", p.org)
		}
		org = p.org
	}
	ws, err := scopeWorkspace(p, q.Get("workspace"))
	if err != nil {
		return err
	}
	from, err := parseDay("from", q.Get("from"))
	if err != nil {
		return err
	}
	to, err := parseDay("to", q.Get("to"))
	if err != nil {
		return err
	}
	var groups []string
	if g := q.Get("group_by"); g != "" {
		groups = strings.Split(g, ",")
	}
	rows, err := h.cat.Usage(r.Context(), catalog.UsageQuery{Org: org, Workspace: ws, Key: q.Get("key"), From: from, To: to, GroupBy: groups})
	if err != nil {
		return err
	}
	out := make([]usageOut, 0, len(rows))
	for _, row := range rows {
		out = append(out, usageOut{row, money(row.CostMicros)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"usage": out})
	return nil
}

// audit answers GET /admin/v1/audit?actor=&action=&target=&since=&before_id=&limit=&workspace=.
// A viewer reads the entries of its workspaces.
func (h *Handler) audit(w http.ResponseWriter, r *http.Request, p *principal) error {
	q := r.URL.Query()
	if err := checkParams(q, "actor", "action", "target", "since", "before_id", "limit", "workspace"); err != nil {
		return err
	}
	aq := catalog.AuditQuery{Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target")}
	var err error
	if aq.Since, err = parseDay("since", q.Get("since")); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"before_id", &aq.BeforeID}} {
		if s := q.Get(f.name); s != "" {
			if *f.dst, err = strconv.ParseInt(s, 10, 64); err != nil || *f.dst < 0 {
				return errorf(http.StatusBadRequest, "invalid", "%s: want a positive integer, got %q", f.name, s)
			}
		}
	}
	if aq.Limit, err = limitParam(q, 0, 1000); err != nil {
		return err
	}
	switch ws := q.Get("workspace"); {
	case ws != "" && !p.canRead(ws):
		return forbiddenWorkspace(ws)
	case ws != "":
		aq.Workspaces = []string{ws}
	case !p.isAdmin():
		aq.Workspaces = p.workspaces
	}
	aq.Org = p.org
	entries, err := h.cat.ListAudit(r.Context(), aq)
	if err != nil {
		return err
	}
	for i := range entries {
		entries[i] = h.auditInDollars(entries[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": nonNilSlice(entries)})
	return nil
}

// maxReservations bounds a listing of open reservations.
const maxReservations = 1000

// reservations answers GET /admin/v1/reservations?limit=: the open
// reservations of every replica sharing the store (or, when the store
// cannot list them, of this process), the soonest deadline first.
func (h *Handler) reservations(w http.ResponseWriter, r *http.Request, _ *principal) error {
	if h.opts.Metrics == nil {
		return errorf(http.StatusNotImplemented, "not_implemented", "this server does not track reservations")
	}
	q := r.URL.Query()
	if err := checkParams(q, "limit"); err != nil {
		return err
	}
	limit, err := limitParam(q, maxReservations, maxReservations)
	if err != nil {
		return err
	}
	list, err := h.opts.Metrics.Reservations(r.Context(), h.now(), limit, h.limiter.RuleOf)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// tokenRequest is the body of POST /admin/v1/tokens.
type tokenRequest struct {
	Name       string    `json:"name"`
	Role       string    `json:"role"`
	Workspaces []string  `json:"workspaces"`
	Org        string    `json:"org"`
	ExpiresAt  time.Time `json:"expires_at"`
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req tokenRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	secret, t, err := h.cat.CreateAdminToken(r.Context(), catalog.AdminToken{Name: req.Name, Role: req.Role,
		Workspaces: req.Workspaces, Org: req.Org, ExpiresAt: req.ExpiresAt}, p.actor)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"token": t, "secret": secret})
	return nil
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request, _ *principal) error {
	tokens, err := h.cat.ListAdminTokens(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": nonNilSlice(tokens)})
	return nil
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request, p *principal) error {
	if err := h.cat.RevokeAdminToken(r.Context(), r.PathValue("id"), p.actor); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
