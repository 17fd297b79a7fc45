package admin

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway/event"
)

// listSessions is GET /admin/v1/sessions?workspace=W&open=true&limit=N:
// sessions newest first, those of the workspaces the token may read.
func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request, p *principal) error {
	q := r.URL.Query()
	ws := q.Get("workspace")
	if ws != "" && !p.canRead(ws) {
		return forbiddenWorkspace(ws)
	}
	limit, err := limitParam(q, 100, 1000)
	if err != nil {
		return err
	}
	sessions, err := h.cat.ListSessions(r.Context(), ws, q.Get("open") == "true", limit)
	if err != nil {
		return err
	}
	out := make([]sessionOut, 0, len(sessions))
	for _, s := range sessions {
		if p.canReadIn(s.Org, s.Workspace) {
			out = append(out, sessionOutOf(s))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
	return nil
}

// endSession is DELETE /admin/v1/sessions/{id}: an operator closes a
// session (a runaway agent); its calls are refused from then on. Audited.
func (h *Handler) endSession(w http.ResponseWriter, r *http.Request, p *principal) error {
	s, err := h.endSessionAs(r.Context(), r.PathValue("id"), p.actor)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"session": sessionOutOf(s)})
	return nil
}

// endSessionAs closes session id for actor, an admin (catalog.EndSession),
// and observes what it used when the close ended it: when no ceiling had
// ended it before.
func (h *Handler) endSessionAs(ctx context.Context, id, actor string) (catalog.Session, error) {
	s, closed, err := h.cat.EndSession(ctx, id, actor)
	if err == nil && closed && s.Ceiling == "" && h.opts.Metrics != nil {
		h.opts.Metrics.SessionEnded("", event.SessionUsage{Turns: s.Turns, Tokens: s.Tokens, Cost: s.Cost})
	}
	return s, err
}

// sessionOut is a session as the admin API writes it: its cost ceiling and
// what it spent in dollars as well as in micro-dollars (max_cost_micros
// and cost_micros, which clients read before). No cost ceiling has no
// max_cost.
type sessionOut struct {
	catalog.Session
	MaxCostDollars *money `json:"max_cost,omitempty"`
	CostDollars    money  `json:"cost"`
}

func sessionOutOf(s catalog.Session) sessionOut {
	out := sessionOut{Session: s, CostDollars: money(s.Cost)}
	if s.MaxCost > 0 {
		out.MaxCostDollars = moneyPtr(&s.MaxCost)
	}
	return out
}
