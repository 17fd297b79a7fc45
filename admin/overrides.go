package admin

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// overrideAttributes are the subjects an override may name through the
// API: each is checked against the keys.
var overrideAttributes = []string{"workspace", "user", "key", "team", "org"}

// overrideRequest is the body of PUT /admin/v1/overrides. Limit and Burst
// are null (or absent) to inherit the rule's value, 0 to disable the rule
// for the subject.
type overrideRequest struct {
	Rule string `json:"rule"`
	// Org is the org of a workspace, team or user value; empty means
	// "default".
	Org       string    `json:"org"`
	Attribute string    `json:"attribute"`
	Value     string    `json:"value"`
	Limit     *int64    `json:"limit"`
	Burst     *int64    `json:"burst"`
	ExpiresAt time.Time `json:"expires_at"`
}

// validate checks what the catalog cannot: the attribute the API accepts,
// the rule in the live policy, an expiry in the future.
func (h *Handler) validateOverride(o *overrideRequest) error {
	switch {
	case o.Rule == "":
		return errorf(http.StatusBadRequest, "invalid", "rule is required")
	case !slices.Contains(overrideAttributes, o.Attribute):
		return errorf(http.StatusBadRequest, "invalid", "attribute must be one of workspace, user, key, team, org; got %q", o.Attribute)
	case o.Value == "":
		return errorf(http.StatusBadRequest, "invalid", "value is required: the %s the override applies to", o.Attribute)
	case o.Limit != nil && *o.Limit < 0:
		return errorf(http.StatusBadRequest, "invalid", "limit must not be negative (null inherits, 0 disables), got %d", *o.Limit)
	case o.Burst != nil && *o.Burst < 0:
		return errorf(http.StatusBadRequest, "invalid", "burst must not be negative (null inherits, 0 means the limit), got %d", *o.Burst)
	case !o.ExpiresAt.IsZero() && !o.ExpiresAt.After(h.now()):
		return errorf(http.StatusBadRequest, "invalid", "expires_at %s is not in the future", o.ExpiresAt.Format(time.RFC3339))
	}
	if !h.ruleInPolicy(o.Rule) {
		return errorf(http.StatusNotFound, "unknown_rule", "no rule named %q is in force; GET /admin/v1/rules lists them", o.Rule)
	}
	return nil
}

func (h *Handler) ruleInPolicy(name string) bool {
	return slices.ContainsFunc(h.limiter.Policy().Rules, func(r sluice.Rule) bool { return r.Name == name })
}

// setOverrideFrom validates and stores an override, then tells the server.
func (h *Handler) setOverrideFrom(ctx context.Context, req overrideRequest, actor string) (catalog.Override, error) {
	if err := h.validateOverride(&req); err != nil {
		return catalog.Override{}, err
	}
	o := catalog.Override{Rule: req.Rule, Org: req.Org, Attribute: req.Attribute, Value: req.Value, Limit: req.Limit, Burst: req.Burst, ExpiresAt: req.ExpiresAt}
	if err := h.cat.SetSubjectOverride(ctx, o, actor); err != nil {
		return catalog.Override{}, err
	}
	h.changed()
	return o.Normalized(), nil
}

func (h *Handler) setOverride(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req overrideRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	o, err := h.setOverrideFrom(r.Context(), req, p.actor)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"override": o})
	return nil
}

// deleteOverride answers DELETE /admin/v1/overrides/{rule}/{attribute}/{value}[?org=]:
// org names the org of a workspace, team or user (default "default").
func (h *Handler) deleteOverride(w http.ResponseWriter, r *http.Request, p *principal) error {
	o := catalog.Override{Rule: r.PathValue("rule"), Org: r.URL.Query().Get("org"), Attribute: r.PathValue("attribute"), Value: r.PathValue("value")}
	if err := h.cat.DeleteOverride(r.Context(), o, p.actor); err != nil {
		return err
	}
	h.changed()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listOverrides answers GET /admin/v1/overrides[?workspace=&user=&key=&rule=].
// A viewer sees the overrides of its workspaces and of their keys.
func (h *Handler) listOverrides(w http.ResponseWriter, r *http.Request, p *principal) error {
	q := r.URL.Query()
	if ws := q.Get("workspace"); ws != "" && !p.canRead(ws) {
		return forbiddenWorkspace(ws)
	}
	out, err := h.visibleOverrides(r.Context(), p)
	if err != nil {
		return err
	}
	out = slices.DeleteFunc(out, func(o catalog.Override) bool {
		for _, f := range []string{"workspace", "user", "key"} {
			if v := q.Get(f); v != "" && (o.Attribute != f || o.Value != v) {
				return true
			}
		}
		return q.Get("rule") != "" && o.Rule != q.Get("rule")
	})
	writeJSON(w, http.StatusOK, map[string]any{"overrides": out})
	return nil
}

// visibleOverrides returns the overrides p may read.
func (h *Handler) visibleOverrides(ctx context.Context, p *principal) ([]catalog.Override, error) {
	all, err := h.cat.ListOverrides(ctx)
	if err != nil || p.isAdmin() {
		return nonNilSlice(all), err
	}
	keyWorkspace := map[string]string{}
	if slices.ContainsFunc(all, func(o catalog.Override) bool { return o.Attribute == "key" }) {
		keys, err := h.cat.ListKeys(ctx, "")
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			keyWorkspace[k.ID] = k.Workspace
		}
	}
	out := []catalog.Override{}
	for _, o := range all {
		switch o.Attribute {
		case "workspace":
			if o.Org == p.org && p.canRead(o.Value) {
				out = append(out, o)
			}
		case "key":
			if ws, ok := keyWorkspace[o.Value]; ok && p.canRead(ws) {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
