package admin

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// ruleRequest is the body of POST /admin/v1/rules and PUT
// /admin/v1/rules/{name}: a rule's JSON form (sluice.RuleJSON), limit
// required.
type ruleRequest struct {
	sluice.RuleJSON
	// Limit, SoftLimit and ReserveAmount are counts, or, on a cost rule,
	// dollars (see amountOf).
	Limit         json.RawMessage `json:"limit"`
	SoftLimit     json.RawMessage `json:"soft_limit"`
	ReserveAmount json.RawMessage `json:"reserve_amount"`
}

func (q *ruleRequest) rule() (catalog.Rule, error) {
	if isNull(q.Limit) {
		return catalog.Rule{}, errorf(http.StatusBadRequest, "invalid", "limit is required (0 disables the rule)")
	}
	r := q.Rule()
	cost := r.Metric == sluice.MetricCost
	var err error
	if r.Limit, err = amountOf("limit", q.Limit, cost); err != nil {
		return catalog.Rule{}, err
	}
	if r.SoftLimit, err = amountOf("soft_limit", q.SoftLimit, cost); err != nil {
		return catalog.Rule{}, err
	}
	if r.ReserveAmount, err = amountOf("reserve_amount", q.ReserveAmount, cost); err != nil {
		return catalog.Rule{}, err
	}
	return catalog.Rule{Rule: r}, nil
}

// policyRule is a rule in force, from any layer, with where it came from
// (its Source).
type policyRule struct{ sluice.Rule }

// MarshalJSON writes the rule's JSON form, a cost rule's amounts in
// dollars, then its source.
func (p policyRule) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(struct {
		sluice.RuleJSON
		Source string `json:"source"`
	}{p.JSON(), p.Source})
	return inDollars(p.Metric, b, err)
}

// policyRules returns the rules in force, every layer resolved.
func (h *Handler) policyRules() []policyRule { return h.policyRulesOf(nil) }

// policyRulesOf returns the rules in force in org (every rule when org is
// nil): the deployment's and org's own.
func (h *Handler) policyRulesOf(org *string) []policyRule {
	rules := h.limiter.Policy().Rules
	out := make([]policyRule, 0, len(rules))
	for _, r := range rules {
		if org == nil || r.Org == "" || r.Org == *org {
			out = append(out, policyRule{r})
		}
	}
	return out
}

// ruleOrg returns the org a rule route names (?org=; empty or absent names
// the deployment's rules), or nil when absent. A viewer reads its own org
// only: absent means it, another is 403.
func ruleOrg(r *http.Request, p *principal) (*string, error) {
	q := r.URL.Query()
	org, named := q.Get("org"), q.Has("org")
	if p.isAdmin() {
		if !named {
			return nil, nil
		}
		return &org, nil
	}
	if named && org != p.org && org != "" {
		return nil, errorf(http.StatusForbidden, "forbidden", "this token reads the rules of org %q only", p.org)
	}
	return &p.org, nil
}

// listRules answers GET /admin/v1/rules[?org=]: the stored rules (of org,
// "" naming the deployment rules; of every org when absent), and the
// policy in force there (defaults, config, environment and stored rules
// resolved). A viewer sees its org's stored rules and the policy in force
// in its org only.
func (h *Handler) listRules(w http.ResponseWriter, r *http.Request, p *principal) error {
	org, err := ruleOrg(r, p)
	if err != nil {
		return err
	}
	var stored []catalog.Rule
	if org == nil {
		stored, err = h.cat.ListRules(r.Context())
	} else {
		stored, err = h.cat.ListRules(r.Context(), *org)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": rulesOut(stored), "policy": h.policyRulesOf(org)})
	return nil
}

// storedOrg is the org a route on one stored rule names: ?org=, the
// deployment's rules ("") when absent.
func storedOrg(r *http.Request, p *principal) (string, error) {
	org, err := ruleOrg(r, p)
	if err != nil || org == nil {
		return "", err
	}
	return *org, nil
}

func (h *Handler) getRule(w http.ResponseWriter, r *http.Request, p *principal) error {
	org, err := storedOrg(r, p)
	if err != nil {
		return err
	}
	if !p.isAdmin() && org == "" {
		// A viewer's rule of that name, else the deployment's.
		if rule, err := h.cat.GetRule(r.Context(), p.org, r.PathValue("name")); err == nil {
			writeJSON(w, http.StatusOK, map[string]any{"rule": ruleOutOf(rule)})
			return nil
		}
	}
	rule, err := h.cat.GetRule(r.Context(), org, r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"rule": ruleOutOf(rule)})
	return nil
}

// createRule answers POST /admin/v1/rules, and POST /admin/v1/budgets when
// kind is KindBudget (the body's kind may then be left out).
func (h *Handler) createRule(kind sluice.Kind) apiHandler {
	return func(w http.ResponseWriter, r *http.Request, p *principal) error {
		var req ruleRequest
		if err := decode(w, r, &req); err != nil {
			return err
		}
		if kind != "" {
			if req.Kind != "" && req.Kind != kind {
				return errorf(http.StatusBadRequest, "invalid", "kind must be %q here (or left out), got %q; other kinds go to /admin/v1/rules", kind, req.Kind)
			}
			req.Kind = kind
		}
		rule, err := req.rule()
		if err != nil {
			return err
		}
		created, err := h.cat.CreateRule(r.Context(), rule, p.actor)
		if err != nil {
			return err
		}
		h.changed()
		writeJSON(w, http.StatusCreated, map[string]any{"rule": ruleOutOf(created)})
		return nil
	}
}

// updateRule answers PUT /admin/v1/rules/{name}[?org=]: the rule stored
// for org (the body's org when the query names none; the deployment's when
// neither does).
func (h *Handler) updateRule(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req ruleRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	rule, err := req.rule()
	if err != nil {
		return err
	}
	org := rule.Org
	if r.URL.Query().Has("org") {
		org = r.URL.Query().Get("org")
		if rule.Org == "" {
			rule.Org = org
		}
	}
	updated, err := h.cat.UpdateRule(r.Context(), org, r.PathValue("name"), rule, p.actor)
	if err != nil {
		return err
	}
	h.changed()
	writeJSON(w, http.StatusOK, map[string]any{"rule": ruleOutOf(updated)})
	return nil
}

func (h *Handler) deleteRule(w http.ResponseWriter, r *http.Request, p *principal) error {
	if err := h.cat.DeleteRule(r.Context(), r.URL.Query().Get("org"), r.PathValue("name"), p.actor); err != nil {
		return err
	}
	h.changed()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) enableRule(enabled bool) apiHandler {
	return func(w http.ResponseWriter, r *http.Request, p *principal) error {
		rule, err := h.cat.SetRuleEnabled(r.Context(), r.URL.Query().Get("org"), r.PathValue("name"), enabled, p.actor)
		if err != nil {
			return err
		}
		h.changed()
		writeJSON(w, http.StatusOK, map[string]any{"rule": ruleOutOf(rule)})
		return nil
	}
}

// reload answers POST /admin/v1/reload: the server re-reads its config and
// swaps in the new policy, or refuses and keeps the old one.
func (h *Handler) reload(w http.ResponseWriter, r *http.Request, p *principal) error {
	if h.opts.Reload == nil {
		return errorf(http.StatusNotImplemented, "not_implemented", "this server cannot reload its configuration")
	}
	err := h.opts.Reload()
	entry := catalog.AuditEntry{Actor: p.actor, Action: "config.reload", After: map[string]any{"ok": err == nil}}
	if err != nil {
		entry.After = map[string]any{"ok": false, "error": err.Error()}
		entry.Denied = true
	}
	if aerr := h.cat.Audit(r.Context(), entry); aerr != nil {
		h.log.Error("admin: audit a reload", "err", aerr)
	}
	if err != nil {
		return errorf(http.StatusUnprocessableEntity, "invalid_config", "the configuration was not reloaded (the running one is kept): %v", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"reloaded": true, "at": h.now().UTC().Format(time.RFC3339)})
	return nil
}
