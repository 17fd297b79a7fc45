package main

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
)

// startAdmin serves the admin API's key routes on cfg.AdminListen behind
// the admin token. It returns the generated token when it made one.
func startAdmin(cfg *config.Config, cat *catalog.Catalog, log *slog.Logger) (*http.Server, string, error) {
	token, generated, err := adminToken(cfg)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	a := &adminAPI{cat: cat}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"status":"ok"}`)) })
	mux.HandleFunc("GET /admin/v1/keys", a.listKeys)
	mux.HandleFunc("POST /admin/v1/keys", a.createKey)
	mux.HandleFunc("DELETE /admin/v1/keys/{id}", a.revokeKey)
	ln, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: requireToken(token, mux), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener", "err", err)
		}
	}()
	if !generated {
		token = ""
	}
	return srv, token, nil
}

// requireToken lets through requests bearing token, compared in constant
// time; /healthz is open.
func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "admin token required: Authorization: Bearer $SLUICE_ADMIN_TOKEN"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

type adminAPI struct{ cat *catalog.Catalog }

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
}

func (a *adminAPI) createKey(w http.ResponseWriter, r *http.Request) {
	var req keyRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid body: " + err.Error()})
		return
	}
	secret, key, err := a.cat.CreateKey(r.Context(), catalog.Key{Org: req.Org, Workspace: req.Workspace, Team: req.Team,
		User: req.User, Tier: req.Tier, Name: req.Name, AllowedModels: req.AllowedModels, ExpiresAt: req.ExpiresAt}, "admin")
	if err != nil {
		writeJSON(w, statusOf(err), map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"key": key, "secret": secret})
}

func (a *adminAPI) listKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := a.cat.ListKeys(r.Context(), r.URL.Query().Get("workspace"))
	if err != nil {
		writeJSON(w, statusOf(err), map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

func (a *adminAPI) revokeKey(w http.ResponseWriter, r *http.Request) {
	if err := a.cat.RevokeKey(r.Context(), r.PathValue("id"), "admin"); err != nil {
		writeJSON(w, statusOf(err), map[string]string{"error": err.Error()})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, catalog.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, catalog.ErrUnknownKey):
		return http.StatusNotFound
	case strings.Contains(err.Error(), "context"):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
