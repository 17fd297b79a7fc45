package admin

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	// html/template as the standard library has it, but for calls of
	// methods from a template (the funcs zero, query and format of
	// newConsole stand for the three it needed): text/template calls a
	// method through reflect.Value.MethodByName, which makes the linker
	// keep every exported method in the binary, 16 MB of it (BENCHMARKS.md,
	// binary size).
	template "github.com/DataDog/datadog-agent/pkg/template/html"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

//go:embed ui
var uiFiles embed.FS

// sessionTTL is how long a console login lasts.
const sessionTTL = 12 * time.Hour

const sessionCookie = "sluice_session"

// loginCookie carries the sign-in form's CSRF token, which the form repeats:
// a page of another site cannot read it, so it cannot sign a browser in to
// a session of the attacker's choosing.
const loginCookie = "sluice_login"

// maxSessions bounds the console logins kept; past it the oldest is
// forgotten (its browser signs in again).
const maxSessions = 1000

// maxSessionsPerToken bounds the console logins of one token; past it that
// token's oldest is forgotten, so one token signing in again and again (a
// viewer's) cannot push everyone else's logins out.
const maxSessionsPerToken = 20

// console is the web console under /ui/: server-rendered pages over the
// same catalog and limiter as the API, with the same roles.
type console struct {
	h     *Handler
	pages map[string]*template.Template

	mu       sync.Mutex
	sessions map[string]*session
}

// session is a console login. It keeps the token, not the principal, so
// that a token revoked or expired since the login stops working at once.
type session struct {
	token   string
	csrf    string
	expires time.Time
}

func newConsole(h *Handler) (*console, error) {
	c := &console{h: h, pages: map[string]*template.Template{}, sessions: map[string]*session{}}
	funcs := template.FuncMap{
		"since":   func(t time.Time) string { return h.now().Sub(t).Round(time.Second).String() },
		"time":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
		"num":     formatNumber,
		"dollars": func(micros int64) string { return amountText(string(sluice.MetricCost), micros) },
		"pct":     percent,
		// settled tells a settled call's outcome from a refusal's.
		"settled": catalog.Settled,
		"barclass": func(used, limit int64) string {
			switch p := percent(used, limit); {
			case p >= 100:
				return "bar full"
			case p >= 80:
				return "bar warn"
			}
			return "bar"
		},
		"add":    func(a, b int64) int64 { return a + b },
		"zero":   func(t time.Time) bool { return t.IsZero() },
		"query":  func(q url.Values, key string) string { return q.Get(key) },
		"format": func(t time.Time, layout string) string { return t.Format(layout) },
		"amount": amountText,
		// overrideAmount is an override's limit or burst in its rule's metric.
		"overrideAmount": overrideAmount,
		"deref": func(p *int64) int64 {
			if p == nil {
				return 0
			}
			return *p
		},
		// ruleAmount is an override's limit or burst in the metric of its
		// rule in force (a cost rule's in dollars).
		"ruleAmount": func(rule string, p *int64) string { return overrideAmount(h.ruleMetric(rule), p) },
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(uiFiles, "ui/layout.html", "ui/bar.html", "ui/chart.html")
	if err != nil {
		return nil, fmt.Errorf("admin: console templates: %w", err)
	}
	names, err := fs.Glob(uiFiles, "ui/page_*.html")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		t, err := template.Must(layout.Clone()).ParseFS(uiFiles, name)
		if err != nil {
			return nil, fmt.Errorf("admin: console template %s: %w", name, err)
		}
		c.pages[strings.TrimSuffix(strings.TrimPrefix(name, "ui/page_"), ".html")] = t
	}
	return c, nil
}

func (c *console) routes(m *patternMux) {
	static, _ := fs.Sub(uiFiles, "ui/static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /ui/login", c.loginPage)
	// Cross-origin writes are refused by the browser's own Sec-Fetch-Site
	// or Origin, before any token is looked at.
	m.Handle("POST /ui/login", crossOrigin.Handler(http.HandlerFunc(c.login)))
	m.Handle("POST /ui/logout", crossOrigin.Handler(http.HandlerFunc(c.logout)))
	m.Handle("GET /ui/{$}", c.page(c.workspaces))
	m.Handle("GET /ui/workspaces/{ws}", c.page(c.workspace))
	m.Handle("POST /ui/workspaces/{ws}/overrides", c.page(c.setOverride))
	m.Handle("POST /ui/workspaces/{ws}/overrides/delete", c.page(c.deleteOverride))
	m.Handle("GET /ui/rules", c.page(c.rules))
	m.Handle("GET /ui/overrides", c.page(c.overrides))
	m.Handle("GET /ui/reservations", c.page(c.reservations))
	m.Handle("GET /ui/sessions", c.page(c.sessionsPage))
	m.Handle("GET /ui/circuits", c.page(c.circuitsPage))
	m.Handle("POST /ui/sessions/{id}/end", c.page(c.endSessionForm))
	m.Handle("GET /ui/audit", c.page(c.audit))
	m.Handle("GET /ui/calls", c.page(c.callsPage))
	m.Handle("GET /ui/keys", c.page(c.keysPage))
	m.Handle("GET /ui/keys/{id}", c.page(c.keyPage))
	m.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusSeeOther) })
}

// view is what every page template receives.
type view struct {
	Title   string
	Nav     string
	Actor   string
	Role    string
	IsAdmin bool
	Scope   []string
	CSRF    string
	Error   string
	Notice  string
	Data    any
}

// pageFunc renders one page for a logged-in principal.
type pageFunc func(w http.ResponseWriter, r *http.Request, p *principal, v *view) (status int, page string, err error)

// page checks the session, runs fn and renders the page it names.
func (c *console) page(fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, p, err := c.sessionOf(r)
		if err != nil {
			var ae *authError
			if errors.As(err, &ae) {
				if r.Method == http.MethodPost {
					c.h.auditDenied(r, "anonymous", http.StatusUnauthorized, ae.reason)
				}
				http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
				return
			}
			c.h.writeError(w, err)
			return
		}
		v := &view{Actor: p.actor, Role: p.role, IsAdmin: p.isAdmin(), Scope: p.workspaces, CSRF: s.csrf}
		if r.Method == http.MethodPost {
			if err := crossOrigin.Check(r); err != nil {
				c.h.auditDenied(r, p.actor, http.StatusForbidden, "a cross-origin form")
				http.Error(w, "cross-origin requests are refused", http.StatusForbidden)
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
				c.h.auditDenied(r, p.actor, http.StatusForbidden, "missing or wrong CSRF token")
				http.Error(w, "the form is stale: reload the page and try again", http.StatusForbidden)
				return
			}
			if !p.isAdmin() {
				c.h.auditDenied(r, p.actor, http.StatusForbidden, "viewer tokens are read-only")
				v.Title, v.Error = "Forbidden", "Viewer tokens are read-only."
				c.renderStatus(w, "error", v, http.StatusForbidden)
				return
			}
		}
		status, name, err := fn(w, r, p, v)
		if err != nil {
			ae := errorOf(err)
			if ae.Status >= 500 {
				c.h.log.Error("admin: console", "err", err)
			}
			v.Title, v.Error = http.StatusText(ae.Status), ae.Message
			c.renderStatus(w, "error", v, ae.Status)
			return
		}
		if name == "" { // fn redirected
			return
		}
		c.renderStatus(w, name, v, status)
	})
}

func (c *console) render(w http.ResponseWriter, name string, v *view) {
	c.renderStatus(w, name, v, http.StatusOK)
}

// renderStatus renders page name with status, its headers set first.
func (c *console) renderStatus(w http.ResponseWriter, name string, v *view, status int) {
	t, ok := c.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	if err := t.ExecuteTemplate(w, "layout.html", v); err != nil {
		c.h.log.Error("admin: console render", "page", name, "err", err)
	}
}

// crossOrigin refuses unsafe requests a browser marks as sent by another
// site.
var crossOrigin = http.NewCrossOriginProtection()

func (c *console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.renderLogin(w, r, http.StatusOK, "")
}

// renderLogin shows the sign-in form with a fresh CSRF token, in a cookie
// and in the form.
func (c *console) renderLogin(w http.ResponseWriter, r *http.Request, status int, message string) {
	csrf := randomHex(16)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: csrf, Path: "/ui/login", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(time.Hour / time.Second)})
	c.renderStatus(w, "login", &view{Title: "Sign in", Error: message, CSRF: csrf}, status)
}

func (c *console) login(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(loginCookie)
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(ck.Value)) != 1 {
		c.h.auditDenied(r, "anonymous", http.StatusForbidden, "console sign-in without the form's CSRF token")
		c.renderLogin(w, r, http.StatusForbidden, "Sign-in refused: the form has expired or did not come from this console; try again.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if _, err := c.h.authenticate(r.Context(), token); err != nil {
		var ae *authError
		if !errors.As(err, &ae) {
			c.h.writeError(w, err)
			return
		}
		c.renderLogin(w, r, http.StatusUnauthorized, "Sign-in refused: "+ae.reason+".")
		return
	}
	sid, csrf := randomHex(32), randomHex(16)
	now := c.h.now()
	c.mu.Lock()
	for id, s := range c.sessions {
		if !now.Before(s.expires) {
			delete(c.sessions, id)
		}
	}
	c.forgetOldest(func(s *session) bool { return s.token == token }, maxSessionsPerToken)
	c.forgetOldest(func(*session) bool { return true }, maxSessions)
	c.sessions[sid] = &session{token: token, csrf: csrf, expires: now.Add(sessionTTL)}
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/ui/login", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sid, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(sessionTTL / time.Second)})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		c.mu.Lock()
		delete(c.sessions, ck.Value)
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// forgetOldest forgets the oldest of the sessions that match until fewer
// than limit match; c.mu is held.
func (c *console) forgetOldest(match func(*session) bool, limit int) {
	for {
		oldest, n := "", 0
		for id, s := range c.sessions {
			if !match(s) {
				continue
			}
			n++
			if oldest == "" || s.expires.Before(c.sessions[oldest].expires) {
				oldest = id
			}
		}
		if n < limit {
			return
		}
		delete(c.sessions, oldest)
	}
}

// sessionOf returns the request's session and its principal, checking the
// token again.
func (c *console) sessionOf(r *http.Request) (*session, *principal, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, nil, &authError{"sign in first"}
	}
	c.mu.Lock()
	s := c.sessions[ck.Value]
	if s != nil && !c.h.now().Before(s.expires) {
		delete(c.sessions, ck.Value)
		s = nil
	}
	c.mu.Unlock()
	if s == nil {
		return nil, nil, &authError{"the session has ended; sign in again"}
	}
	p, err := c.h.authenticate(r.Context(), s.token)
	if err != nil {
		return nil, nil, err
	}
	return s, p, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// amountText shows an amount of metric: a cost in dollars (to the cent,
// or every digit under a cent, so that a small spend does not read as
// none), anything else as a number.
func amountText(metric string, n int64) string {
	switch {
	case metric != string(sluice.MetricCost):
		return formatNumber(n)
	case n > 0 && n < 10_000:
		return strings.TrimRight(fmt.Sprintf("$0.%06d", n), "0")
	}
	return fmt.Sprintf("$%.2f", float64(n)/1e6)
}

// overrideAmount shows an override's limit or burst: nil inherits the
// rule's, 0 disables the rule, anything else is an amount of metric.
func overrideAmount(metric string, p *int64) string {
	switch {
	case p == nil:
		return "inherit"
	case *p == 0:
		return "0 (disabled)"
	}
	return amountText(metric, *p)
}

// formatNumber writes n with thousands separators.
func formatNumber(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// percent is used/limit in whole percent, capped at 100.
func percent(used, limit int64) int64 {
	if limit <= 0 {
		return 0
	}
	p := int64(float64(used) * 100 / float64(limit))
	if used > 0 && p == 0 {
		p = 1
	}
	return max(0, min(p, 100))
}
