package admin

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// keyRequest is the body of POST /admin/v1/keys.
type keyRequest struct {
	Org           string    `json:"org"`
	Workspace     string    `json:"workspace"`
	Team          string    `json:"team"`
	User          string    `json:"user"`
	Tier          string    `json:"tier"`
	Name          string    `json:"name"`
	AllowedModels []string  `json:"allowed_models"`
	ExpiresAt     time.Time `json:"expires_at"`
	// Assert and AssertWorkspaces make a service key (catalog.Key).
	Assert           []string `json:"assert"`
	AssertWorkspaces []string `json:"assert_workspaces"`
	// Limits are the key's own limits, made with it (see keyLimits).
	Limits *keyLimitsRequest `json:"limits"`
	// Class is the key's priority class; MaxWait its own bound on
	// waiting (maxWaitField).
	Class   string          `json:"class"`
	MaxWait json.RawMessage `json:"max_wait"`
	// Turns lets the key group its calls into turns (catalog.Key.Turns).
	Turns bool `json:"turns"`
	// NoCache keeps the key's calls out of the response cache
	// (catalog.Key.NoCache).
	NoCache bool `json:"no_cache"`
}

// maxWaitField reads the max_wait of a key's body: a duration string
// ("2s", "500ms"); "0s" and null mean the tier's bound. Absent is nil.
// Its range is the catalog's to check.
func maxWaitField(raw json.RawMessage) (*time.Duration, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var d time.Duration
	if string(raw) != "null" {
		var s string
		err := json.Unmarshal(raw, &s)
		if err == nil {
			d, err = time.ParseDuration(s)
		}
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"max_wait\": want a duration string such as \"2s\" or \"500ms\" (\"0s\" or null: the tier's), got %s", raw)
		}
	}
	return &d, nil
}

// keySecret is a key with its secret: the answer to a creation or a
// rotation, the only time the secret is shown. A creation also lists the
// overrides that hold the key's own limits (a budget's in dollars), and
// the other rules in force that apply to the key's calls beside them (the
// built-in ones, the config file's, the stored ones), so that none is a
// surprise.
type keySecret struct {
	Key         catalog.Key   `json:"key"`
	Secret      string        `json:"secret"`
	Overrides   []overrideOut `json:"overrides,omitempty"`
	AlsoApplies []limitView   `json:"also_applies,omitempty"`
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request, p *principal) error {
	ws := r.URL.Query().Get("workspace")
	if ws != "" && !p.canRead(ws) {
		return forbiddenWorkspace(ws)
	}
	keys, err := h.cat.ListKeys(r.Context(), ws)
	if err != nil {
		return err
	}
	out := make([]catalog.Key, 0, len(keys))
	for _, k := range keys {
		if p.canReadIn(k.Org, k.Workspace) {
			out = append(out, k)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": out})
	return nil
}

func (h *Handler) getKey(w http.ResponseWriter, r *http.Request, p *principal) error {
	k, err := h.cat.GetKey(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if !p.canReadIn(k.Org, k.Workspace) {
		return forbiddenWorkspace(k.Workspace)
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": k})
	return nil
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req keyRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	// A typo in a tier would grant the untiered limits, one in a model a
	// key that can call nothing.
	if check := h.opts.CheckKey; check != nil {
		if err := check(req.Tier, req.AllowedModels); err != nil {
			return errorf(http.StatusBadRequest, "invalid_key", "%v", err)
		}
	}
	maxWait, err := maxWaitField(req.MaxWait)
	if err != nil {
		return err
	}
	limits, err := h.keyLimits(req.Limits, req.Org)
	if err != nil {
		return err
	}
	k := catalog.Key{Org: req.Org, Workspace: req.Workspace, Team: req.Team,
		User: req.User, Tier: req.Tier, Name: req.Name, AllowedModels: req.AllowedModels, ExpiresAt: req.ExpiresAt,
		Assert: req.Assert, AssertWorkspaces: req.AssertWorkspaces, Class: req.Class, Turns: req.Turns, NoCache: req.NoCache}
	if maxWait != nil {
		k.MaxWait = sluice.Duration(*maxWait)
	}
	secret, k, overrides, err := h.cat.CreateKeyWithLimits(r.Context(), k, limits, p.actor)
	if err != nil {
		return err
	}
	if len(limits) > 0 {
		h.changed()
	}
	answer := keySecret{Key: k, Secret: secret}
	own := map[string]bool{}
	for _, o := range overrides {
		answer.Overrides = append(answer.Overrides, h.overrideOut(o))
		own[o.Rule] = true
	}
	// The key is made: a store that cannot say what applies leaves the
	// list out rather than lose the secret.
	applies, err := h.limitsOf(r.Context(), keyIdentity(k))
	if err != nil {
		h.log.Error("admin: list the rules that apply to a new key", "key", k.ID, "err", err)
	}
	for _, l := range applies {
		if !own[l.Rule] {
			answer.AlsoApplies = append(answer.AlsoApplies, l)
		}
	}
	writeJSON(w, http.StatusCreated, answer)
	return nil
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, p *principal) error {
	id := r.PathValue("id")
	if err := h.cat.RevokeKey(r.Context(), id, p.actor); err != nil {
		return err
	}
	k, err := h.cat.GetKey(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": k})
	return nil
}

func (h *Handler) rotateKey(w http.ResponseWriter, r *http.Request, p *principal) error {
	id := r.PathValue("id")
	secret, err := h.cat.RotateKey(r.Context(), id, p.actor)
	if err != nil {
		return err
	}
	k, err := h.cat.GetKey(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, keySecret{Key: k, Secret: secret})
	return nil
}

func forbiddenWorkspace(ws string) error {
	return errorf(http.StatusForbidden, "forbidden_workspace", "this token may not read workspace %q", ws)
}
