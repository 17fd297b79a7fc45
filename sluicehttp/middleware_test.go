package sluicehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/sluicehq/sluice/store/memstore"
)

// mwRequest is the admission Middleware tests build: the key from the
// X-Key header (as a trusted proxy would set it), 100 input and 50 output
// tokens at most.
func mwRequest(r *http.Request) (sluice.Request, error) {
	key := r.Header.Get("X-Key")
	if key == "" {
		return sluice.Request{}, errors.New("no key")
	}
	return tokens(key, 100, 50), nil
}

func mwServe(t *testing.T, l *sluice.Limiter, opts sluicehttp.Options, h http.HandlerFunc, key string) *httptest.ResponseRecorder {
	t.Helper()
	if opts.Request == nil {
		opts.Request = mwRequest
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/work", strings.NewReader("{}"))
	if key != "" {
		req.Header.Set("X-Key", key)
	}
	sluicehttp.Middleware(l, opts)(h).ServeHTTP(rec, req)
	return rec
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "done") }

type mwErrorBody struct {
	Error struct {
		Code    string                   `json:"code"`
		Message string                   `json:"message"`
		Limit   *sluicehttp.RefusalLimit `json:"limit"`
	} `json:"error"`
}

func TestMiddleware_RefusalAnswers(t *testing.T) {
	tests := []struct {
		name  string
		rules []sluice.Rule
		store func() sluice.Store
		// before runs against the limiter first, to use up the rule.
		before func(t *testing.T, l *sluice.Limiter)
		key    string

		status     int
		code       string
		rule       string
		retryAfter string // Retry-After; empty for none
		retryMS    string
		noRetry    bool // x-should-retry: false
		rateLimit  bool // X-RateLimit fields present
		resetAt    bool // limit.reset_at in the body
	}{
		{
			name: "rate limit", rules: []sluice.Rule{rpm(1)}, key: "k1",
			before: func(t *testing.T, l *sluice.Limiter) { admit(t, l, byKey("k1")) },
			status: 429, code: "rate_limit_exceeded", rule: "rpm", retryAfter: "60", retryMS: "60000", rateLimit: true, resetAt: true,
		},
		{
			name: "busy", rules: []sluice.Rule{inFlight(1)}, key: "k1",
			before: func(t *testing.T, l *sluice.Limiter) { admit(t, l, byKey("k1")) },
			status: 429, code: "concurrency_limit_exceeded", rule: "inflight", retryAfter: "1", retryMS: "1000", rateLimit: true,
		},
		{
			name: "budget", rules: []sluice.Rule{daily(sluice.MetricRequests, 1)}, key: "k1",
			before: func(t *testing.T, l *sluice.Limiter) { admit(t, l, byKey("k1")) },
			status: 429, code: "budget_exceeded", rule: "daily", noRetry: true, rateLimit: true, resetAt: true,
		},
		{
			name: "never fits", rules: []sluice.Rule{daily(sluice.MetricTokens, 120)}, key: "k1",
			status: 413, code: "request_too_large", rule: "daily", noRetry: true, rateLimit: true,
		},
		{
			name: "store unavailable", rules: []sluice.Rule{rpm(10)}, key: "k1",
			store: func() sluice.Store {
				s := newFlakyStore()
				s.fail(errors.New("connection refused"), nil)
				return s
			},
			status: 503, code: "store_unavailable", retryAfter: "1", retryMS: "1000",
		},
		{
			name: "bad request", rules: []sluice.Rule{rpm(10)}, key: "",
			status: 400, code: "invalid_request",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := sluice.Options{Rules: tt.rules}
			if tt.store != nil {
				opts.Store = tt.store()
			}
			l, _ := newLimiter(t, opts)
			if tt.before != nil {
				tt.before(t, l)
			}
			reached := false
			rec := mwServe(t, l, sluicehttp.Options{}, func(w http.ResponseWriter, r *http.Request) {
				reached = true
			}, tt.key)
			if reached {
				t.Fatal("the handler ran for a refused request")
			}
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			h := rec.Header()
			if got := h.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tt.retryAfter)
			}
			if got := h.Get("retry-after-ms"); got != tt.retryMS {
				t.Errorf("retry-after-ms %q, want %q", got, tt.retryMS)
			}
			if got := h.Get("x-should-retry") == "false"; got != tt.noRetry {
				t.Errorf("x-should-retry %q, want false: %v", h.Get("x-should-retry"), tt.noRetry)
			}
			if got := h.Get("X-RateLimit-Limit") != ""; got != tt.rateLimit {
				t.Errorf("X-RateLimit-Limit %q, want present: %v", h.Get("X-RateLimit-Limit"), tt.rateLimit)
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var body mwErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if body.Error.Code != tt.code || body.Error.Message == "" {
				t.Errorf("body %s, want code %q", rec.Body, tt.code)
			}
			if tt.rule != "" && (body.Error.Limit == nil || body.Error.Limit.Rule != tt.rule || !strings.Contains(body.Error.Message, tt.rule)) {
				t.Errorf("body %s should name the rule %q", rec.Body, tt.rule)
			}
			if tt.resetAt && (body.Error.Limit == nil || body.Error.Limit.ResetAt == "") {
				t.Errorf("body %s should say when the rule resets", rec.Body)
			}
		})
	}
}

func TestMiddleware_SettlesWhatTheHandlerLeft(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		// used is the daily token budget's usage after the request.
		used int64
	}{
		{
			name:    "handler settles the real usage",
			handler: settleWith(sluice.Usage{InputTokens: 30, OutputTokens: 12}),
			used:    42,
		},
		{
			name:    "handler does not settle: the reservation is charged as it stands",
			handler: ok,
			used:    150,
		},
		{
			name: "handler settles twice: the first counts",
			handler: func(w http.ResponseWriter, r *http.Request) {
				settleWith(sluice.Usage{InputTokens: 5, OutputTokens: 5})(w, r)
				settleWith(sluice.Usage{InputTokens: 100, OutputTokens: 50})(w, r)
			},
			used: 10,
		},
		{
			name: "handler releases: the call never reached the model",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if err := sluicehttp.ReservationFrom(r.Context()).Release(r.Context()); err != nil {
					t.Error(err)
				}
			},
			used: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := withRules(t, daily(sluice.MetricTokens, 1000), inFlight(1))
			rec := mwServe(t, l, sluicehttp.Options{}, tt.handler, "k1")
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got := effective(t, l, ident("k1"), "daily").Used; got != tt.used {
				t.Fatalf("budget used %d, want %d", got, tt.used)
			}
			if got := effective(t, l, ident("k1"), "inflight").Used; got != 0 {
				t.Fatalf("%d calls still in flight after the handler returned", got)
			}
		})
	}
}

func settleWith(u sluice.Usage) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res := sluicehttp.ReservationFrom(r.Context())
		if res == nil {
			http.Error(w, "no reservation in the context", http.StatusInternalServerError)
			return
		}
		if err := res.Settle(r.Context(), u); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}

func TestMiddleware_PanicReleasesAndRepanics(t *testing.T) {
	l, _ := withRules(t, daily(sluice.MetricTokens, 1000), inFlight(1))
	handler := sluicehttp.Middleware(l, sluicehttp.Options{Request: mwRequest})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("handler bug")
	}))
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header.Set("X-Key", "k1")
	func() {
		defer func() {
			if v := recover(); v != "handler bug" {
				t.Fatalf("recovered %v, want the handler's panic", v)
			}
		}()
		handler.ServeHTTP(httptest.NewRecorder(), req)
	}()
	for _, rule := range []string{"daily", "inflight"} {
		if got := effective(t, l, ident("k1"), rule).Used; got != 0 {
			t.Fatalf("%s used %d after a panic, want the reservation released", rule, got)
		}
	}
}

func TestMiddleware_AdmittedHeadersAndContext(t *testing.T) {
	budget := daily(sluice.MetricTokens, 1000)
	budget.WarnAt = []float64{0.1}
	l, _ := withRules(t, budget, rpm(10))
	var seen *sluice.Reservation
	rec := mwServe(t, l, sluicehttp.Options{}, func(w http.ResponseWriter, r *http.Request) {
		seen = sluicehttp.ReservationFrom(r.Context())
		ok(w, r)
	}, "k1")
	if rec.Code != http.StatusOK || rec.Body.String() != "done" {
		t.Fatalf("status %d body %q", rec.Code, rec.Body)
	}
	if seen == nil {
		t.Fatal("the handler found no reservation in its context")
	}
	if sluicehttp.ReservationFrom(context.Background()) != nil {
		t.Fatal("a context without a reservation returned one")
	}
	h := rec.Header()
	// The budget holds 850 of 1000 after the reservation, rpm 9 of 10: the
	// budget has the least room.
	want := map[string]string{
		"X-RateLimit-Limit":     "1000",
		"X-RateLimit-Remaining": "850",
		"X-RateLimit-Reset":     "50400", // 14h to midnight UTC from 10:00
		"RateLimit-Policy":      `"daily";q=1000;qu="tokens";w=86400`,
		"RateLimit":             `"daily";r=850;t=50400`,
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s %q, want %q", k, got, v)
		}
	}
	if w := h.Get("X-Sluice-Budget-Warning"); !strings.HasPrefix(w, "daily; used=150; limit=1000") {
		t.Errorf("X-Sluice-Budget-Warning %q", w)
	}
}

func TestMiddleware_OnRefusalAndOnSettleError(t *testing.T) {
	store := newFlakyStore()
	l, _ := newLimiter(t, sluice.Options{Store: store, Rules: []sluice.Rule{daily(sluice.MetricRequests, 1)}})
	var refused, settleErr error
	opts := sluicehttp.Options{
		OnRefusal: func(w http.ResponseWriter, r *http.Request, err error) {
			refused = err
			w.WriteHeader(http.StatusTeapot)
		},
		OnSettleError: func(r *http.Request, err error) { settleErr = err },
	}
	store.fail(nil, errors.New("settle lost"))
	if rec := mwServe(t, l, opts, ok, "k1"); rec.Code != http.StatusOK {
		t.Fatalf("first request: status %d", rec.Code)
	}
	if !errors.Is(settleErr, sluice.ErrStoreUnavailable) {
		t.Fatalf("OnSettleError got %v, want a store error", settleErr)
	}
	if rec := mwServe(t, l, opts, ok, "k1"); rec.Code != http.StatusTeapot {
		t.Fatalf("second request: status %d, want OnRefusal's answer", rec.Code)
	}
	var be *sluice.BudgetError
	if !errors.As(refused, &be) || be.Rule != "daily" {
		t.Fatalf("OnRefusal got %v, want the budget refusal", refused)
	}
}

func TestMiddleware_OverHTTPWithRealTime(t *testing.T) {
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: []sluice.Rule{
		{Name: "burst", Kind: sluice.KindRate, Subject: "key", Limit: 2, Window: time.Second},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sluicehttp.Middleware(l, sluicehttp.Options{Request: mwRequest})(http.HandlerFunc(ok)))
	defer srv.Close()
	var statuses []int
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set("X-Key", "k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q, want 1", resp.Header.Get("Retry-After"))
		}
	}
	if statuses[0] != 200 || statuses[1] != 200 || statuses[2] != 429 {
		t.Fatalf("statuses %v, want 200, 200, 429", statuses)
	}
}

func TestRefusalOf_NonRefusals(t *testing.T) {
	for _, err := range []error{context.Canceled, sluice.ErrInvalidUsage, nil} {
		if _, ok := sluicehttp.RefusalOf(err); ok {
			t.Errorf("RefusalOf(%v) is a refusal", err)
		}
	}
	rec := httptest.NewRecorder()
	sluicehttp.WriteRefusal(rec, httptest.NewRequest(http.MethodGet, "/", nil), context.Canceled)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", rec.Code)
	}
}
