// Package admin is Sluice's admin side: the JSON API under /admin/v1/ (keys,
// rules, budgets, overrides, effective limits, usage, audit, tokens,
// reload), the Prometheus metrics at /metrics and the web console under
// /ui/. It is one http.Handler, served on its own listener.
//
// Every change goes through the catalog, which writes the audit entry in
// the same transaction; a refused write (a bad token, a viewer) is audited
// too. A change that moves limits (a rule, an override) calls
// Options.OnChange before the response, so the next request sees it.
package admin

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// Options configures a Handler. Catalog and Limiter are required.
type Options struct {
	Catalog *catalog.Catalog
	Limiter *sluice.Limiter
	// AdminToken is the deployment's root token (SLUICE_ADMIN_TOKEN): an
	// admin that needs no record. Empty allows only tokens created through
	// the API.
	AdminToken string
	// OnChange is called after a change to rules or overrides, before the
	// response, to rebuild the limiter's policy. Nil does nothing.
	OnChange func()
	// Reload re-reads the configuration and swaps in its policy, or
	// returns why it refused (the old policy is kept). Nil answers
	// POST /admin/v1/reload with 501.
	Reload func() error
	// CheckKey, when set, vets a new key's tier and allowed models against
	// the configuration in force; its error is answered 400
	// (invalid_key) and no key is made. Nil accepts any.
	CheckKey func(tier string, models []string) error
	// Metrics is served at /metrics and lists open reservations; nil
	// serves neither.
	Metrics *Metrics
	// Logger receives the handler's own errors; nil discards them.
	Logger *slog.Logger
	// Now tells the time; nil means time.Now.
	Now func() time.Time
	// Circuits, when set, lists the gateway's circuits for
	// GET /admin/v1/circuits; nil lists none.
	Circuits func() []Circuit
	// Live, when set, lists the live connections (GET /v1/realtime) open
	// in this process, for the console's Sessions page; nil lists none.
	Live func() []LiveConnection
	// PurgeCache, when set, serves DELETE /admin/v1/cache (the response
	// cache); nil answers it 501.
	PurgeCache PurgeCacheFunc
	// Timeout bounds each request's calls to the catalog and the store:
	// past it the request is answered 503 with the cause. Zero means
	// DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 5 * time.Second

// Handler serves the admin API, metrics and console. It is safe for
// concurrent use.
type Handler struct {
	opts    Options
	cat     *catalog.Catalog
	limiter *sluice.Limiter
	log     *slog.Logger
	now     func() time.Time
	mux     *http.ServeMux
	// routes lists the patterns mux serves.
	patterns *patternMux
	console  *console
	// anonymous bounds the audit entries of refused writes without a
	// valid token.
	anonymous denials
}

// New returns the admin Handler.
func New(opts Options) (*Handler, error) {
	if opts.Catalog == nil || opts.Limiter == nil {
		return nil, errors.New("admin: Catalog and Limiter are required")
	}
	h := &Handler{opts: opts, cat: opts.Catalog, limiter: opts.Limiter, log: opts.Logger, now: opts.Now, mux: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.patterns = &patternMux{mux: h.mux}
	h.routes()
	c, err := newConsole(h)
	if err != nil {
		return nil, err
	}
	h.console = c
	c.routes(h.patterns)
	return h, nil
}

// ServeHTTP routes the request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// A stalled database must not hold a goroutine and a socket per
	// request for as long as it stalls.
	ctx, cancel := context.WithTimeout(r.Context(), cmp.Or(h.opts.Timeout, DefaultTimeout))
	defer cancel()
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

func (h *Handler) routes() {
	m := h.patterns
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	if h.opts.Metrics != nil {
		metrics := h.opts.Metrics.Handler()
		m.Handle("GET /metrics", h.read(func(w http.ResponseWriter, r *http.Request, _ *principal) error {
			metrics.ServeHTTP(w, r)
			return nil
		}))
	}
	const v1 = "/admin/v1/"
	m.HandleFunc("GET "+v1+"openapi.json", serveOpenAPI)
	m.Handle("GET "+v1+"keys", h.read(h.listKeys))
	m.Handle("POST "+v1+"keys", h.write(h.createKey))
	m.Handle("GET "+v1+"keys/{id}", h.read(h.getKey))
	m.Handle("PATCH "+v1+"keys/{id}", h.write(h.updateKey))
	m.Handle("DELETE "+v1+"keys/{id}", h.write(h.revokeKey))
	m.Handle("POST "+v1+"keys/{id}/revoke", h.write(h.revokeKey))
	m.Handle("POST "+v1+"keys/{id}/rotate", h.write(h.rotateKey))

	m.Handle("GET "+v1+"overrides", h.read(h.listOverrides))
	m.Handle("PUT "+v1+"overrides", h.write(h.setOverride))
	m.Handle("POST "+v1+"overrides", h.write(h.setOverride))
	m.Handle("DELETE "+v1+"overrides/{rule}/{attribute}/{value}", h.write(h.deleteOverride))

	m.Handle("GET "+v1+"rules", h.read(h.listRules))
	m.Handle("POST "+v1+"rules", h.write(h.createRule("")))
	m.Handle("GET "+v1+"rules/{name}", h.read(h.getRule))
	m.Handle("PUT "+v1+"rules/{name}", h.write(h.updateRule))
	m.Handle("DELETE "+v1+"rules/{name}", h.write(h.deleteRule))
	m.Handle("POST "+v1+"rules/{name}/enable", h.write(h.enableRule(true)))
	m.Handle("POST "+v1+"rules/{name}/disable", h.write(h.enableRule(false)))

	m.Handle("GET "+v1+"budgets", h.read(h.listBudgets))
	m.Handle("POST "+v1+"budgets", h.write(h.createRule(sluice.KindBudget)))

	m.Handle("GET "+v1+"effective", h.read(h.effective))
	m.Handle("GET "+v1+"usage", h.read(h.usage))
	m.Handle("GET "+v1+"calls", h.read(h.calls))
	m.Handle("GET "+v1+"calls/outcomes", h.read(h.callOutcomes))
	m.Handle("GET "+v1+"audit", h.read(h.audit))
	m.Handle("GET "+v1+"reservations", h.adminRead(h.reservations))
	m.Handle("GET "+v1+"circuits", h.read(h.circuits))
	m.Handle("DELETE "+v1+"cache", h.write(h.purgeCache))
	m.Handle("GET "+v1+"sessions", h.read(h.listSessions))
	m.Handle("DELETE "+v1+"sessions/{id}", h.write(h.endSession))

	m.Handle("GET "+v1+"tokens", h.adminRead(h.listTokens))
	m.Handle("POST "+v1+"tokens", h.write(h.createToken))
	m.Handle("DELETE "+v1+"tokens/{id}", h.write(h.revokeToken))

	m.Handle("POST "+v1+"reload", h.write(h.reload))
	m.Handle(v1, h.read(func(http.ResponseWriter, *http.Request, *principal) error {
		return errorf(http.StatusNotFound, "not_found", "no such admin route; see /admin/v1/keys, rules, budgets, overrides, effective, usage, calls, audit, reservations, circuits, cache, sessions, tokens, reload, and GET /admin/v1/openapi.json for all of them")
	}))
}

// principal is who an admin request is made by.
type principal struct {
	// actor names it in the audit log: "admin" for the root token,
	// "token:<id>" for a token made through the API.
	actor string
	role  string
	// workspaces scopes a viewer; empty for an admin.
	workspaces []string
	// org is a viewer's org: its workspaces are that org's, and it reads
	// that org's stored rules only. Empty for an admin (every org).
	org string
}

func (p *principal) isAdmin() bool { return p.role == catalog.RoleAdmin }

// canRead reports whether p may read workspace ws (of p's org, for a
// viewer).
func (p *principal) canRead(ws string) bool {
	return p.isAdmin() || slices.Contains(p.workspaces, ws)
}

// canReadIn reports whether p may read workspace ws of org: a viewer reads
// its own org's workspaces only, whatever another org names its own.
func (p *principal) canReadIn(org, ws string) bool {
	return p.isAdmin() || (cmp.Or(org, sluice.DefaultOrg) == p.org && slices.Contains(p.workspaces, ws))
}

// rootActor names the root token in the audit log.
const rootActor = "admin"

// authError is a request without a valid token.
type authError struct{ reason string }

func (e *authError) Error() string { return e.reason }

// authenticate resolves a bearer token to its principal.
func (h *Handler) authenticate(ctx context.Context, token string) (*principal, error) {
	if token == "" {
		return nil, &authError{"admin token required: send Authorization: Bearer <token>"}
	}
	if h.opts.AdminToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(h.opts.AdminToken)) == 1 {
		return &principal{actor: rootActor, role: catalog.RoleAdmin}, nil
	}
	t, err := h.cat.AuthenticateAdminToken(ctx, token)
	switch {
	case errors.Is(err, catalog.ErrUnknownToken):
		return nil, &authError{"invalid admin token"}
	case errors.Is(err, catalog.ErrRevokedToken):
		return nil, &authError{"admin token revoked"}
	case errors.Is(err, catalog.ErrExpiredToken):
		return nil, &authError{"admin token expired"}
	case err != nil:
		return nil, err
	}
	p := &principal{actor: "token:" + t.ID, role: t.Role, workspaces: t.Workspaces}
	if t.Role != catalog.RoleAdmin {
		p.org = t.Org
	}
	return p, nil
}

func bearer(r *http.Request) string {
	v := r.Header.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "Bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// apiHandler is an admin route: it returns an error for writeError to map.
type apiHandler func(w http.ResponseWriter, r *http.Request, p *principal) error

// read serves a route open to admins and viewers.
func (h *Handler) read(fn apiHandler) http.Handler {
	return h.guard(fn, false, false)
}

// adminRead serves a read-only route open to admins only.
func (h *Handler) adminRead(fn apiHandler) http.Handler {
	return h.guard(fn, true, false)
}

// write serves a route that changes something: admins only, and a refusal
// is audited.
func (h *Handler) write(fn apiHandler) http.Handler {
	return h.guard(fn, true, true)
}

func (h *Handler) guard(fn apiHandler, adminOnly, isWrite bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := h.authenticate(r.Context(), bearer(r))
		var ae *authError
		if errors.As(err, &ae) {
			if isWrite {
				h.auditDenied(r, "anonymous", http.StatusUnauthorized, ae.reason)
			}
			h.writeError(w, errorf(http.StatusUnauthorized, "unauthorized", "%s", ae.reason))
			return
		}
		if err != nil {
			h.writeError(w, err)
			return
		}
		if adminOnly && !p.isAdmin() {
			reason := "this route needs an admin token; viewer tokens read their workspaces only"
			if isWrite {
				reason = "viewer tokens are read-only"
				h.auditDenied(r, p.actor, http.StatusForbidden, reason)
			}
			h.writeError(w, errorf(http.StatusForbidden, "forbidden", "%s", reason))
			return
		}
		if err := fn(w, r, p); err != nil {
			h.writeError(w, err)
		}
	})
}

// auditDenied records a refused write. The token presented is never
// recorded.
// Anonymous denials are recorded at most once a minute per source address,
// with the count of those left out since.
func (h *Handler) auditDenied(r *http.Request, actor string, status int, reason string) {
	after := map[string]any{"status": status, "reason": reason}
	if actor == "anonymous" {
		source := sourceOf(r)
		audit, suppressed := h.anonymous.admit(source, h.now())
		if !audit {
			return
		}
		after["source"] = source
		if suppressed > 0 {
			after["suppressed"] = suppressed
		}
	}
	err := h.cat.Audit(r.Context(), catalog.AuditEntry{
		Actor: actor, Action: "denied", Target: r.Method + " " + r.URL.Path, Denied: true,
		After: after,
	})
	if err != nil {
		h.log.Error("admin: audit a denied write", "err", err)
	}
}

// changed tells the server that limits moved.
func (h *Handler) changed() {
	if h.opts.OnChange != nil {
		h.opts.OnChange()
	}
}
