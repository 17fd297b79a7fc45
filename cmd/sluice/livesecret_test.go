package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/catalogsessions"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestKeyStore_RevokedKeyEndsItsClientSecrets: a client secret minted with
// a catalog key connects while the key is valid; once the key is revoked
// in the catalog, the secrets minted before are refused at connect, by the
// lookup that authenticates keys.
func TestKeyStore_RevokedKeyEndsItsClientSecrets(t *testing.T) {
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{CacheTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	ctx := context.Background()
	secret, key, err := cat.CreateKey(ctx, catalog.Key{Workspace: "w", User: "u"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{}
	g, err := gateway.New(gateway.Options{Limiter: l, Keys: keyStore{cat: cat, config: func() *config.Config { return cfg }, now: time.Now},
		Models:    []gateway.Model{{Name: "mock-small", Provider: "mock", MaxOutputTokens: 100, ContextWindow: 1000}},
		Providers: []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: mock.URL}},
		Sessions: &gateway.Sessions{Store: catalogsessions.Store{Catalog: cat}, Terms: func(gateway.Principal) gateway.SessionTerms {
			return gateway.SessionTerms{Model: "mock-small", MaxDuration: time.Hour}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server()
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown()
	base := "http://" + ln.Addr().String()

	mint := func() string {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/realtime/client_secrets", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var cs struct{ Value string }
		if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil || resp.StatusCode != 200 {
			t.Fatalf("mint: %d, %v", resp.StatusCode, err)
		}
		return cs.Value
	}
	dial := func(clientSecret string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/realtime?model=mock-small",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + clientSecret}}})
	}
	first, second := mint(), mint()
	conn, resp, err := dial(first)
	if err != nil {
		t.Fatalf("connect while the key is valid: %v %v", err, resp)
	}
	conn.CloseNow()
	if err := cat.RevokeKey(ctx, key.ID, "test"); err != nil {
		t.Fatal(err)
	}
	_, resp, err = dial(second)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("connect with a secret of the revoked key: %v %v, want 401", err, resp)
	}
	if body, _ := io.ReadAll(resp.Body); !strings.Contains(string(body), "no longer valid") {
		t.Fatalf("refusal %s", body)
	}
}
