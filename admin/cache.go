package admin

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/catalog"
)

// purgeCache answers DELETE /admin/v1/cache?org=O&model=M: it drops the
// response cache's entries of an org, of a model, or of an org's calls to a
// model (Options.PurgeCache), and audits it (cache.purge) with what it
// dropped.
func (h *Handler) purgeCache(w http.ResponseWriter, r *http.Request, p *principal) error {
	q := r.URL.Query()
	if err := checkParams(q, "org", "model"); err != nil {
		return err
	}
	org, model := q.Get("org"), q.Get("model")
	if org == "" && model == "" {
		return errorf(http.StatusBadRequest, "invalid", "name an org, a model or both (org=, model=): a purge of every entry is not offered")
	}
	if h.opts.PurgeCache == nil {
		return errorf(http.StatusNotImplemented, "not_implemented", "this server has no response cache to purge")
	}
	n, err := h.opts.PurgeCache(r.Context(), org, model)
	entry := catalog.AuditEntry{Actor: p.actor, Action: "cache.purge", Org: org, Target: model,
		Before: map[string]any{"org": org, "model": model}, After: map[string]any{"purged": n}}
	if err != nil {
		entry.After = map[string]any{"purged": n, "error": err.Error()}
	}
	if aerr := h.cat.Audit(r.Context(), entry); aerr != nil {
		h.log.Error("admin: audit a cache purge", "err", aerr)
	}
	if err != nil {
		return errorf(http.StatusServiceUnavailable, "cache_unavailable", "the response cache was purged of %d entries, then failed: %v", n, err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": n, "org": org, "model": model})
	return nil
}

// PurgeCacheFunc drops the response cache's entries of org, of model, or of
// both (empty: any), returning how many (gateway.Gateway.PurgeCache).
type PurgeCacheFunc func(ctx context.Context, org, model string) (int, error)
