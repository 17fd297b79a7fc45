package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// Production refuses a short admin token, and so does every mode on an
// address beyond loopback; development on loopback takes any.
func TestAdminToken_ProductionNeeds32Bytes(t *testing.T) {
	for _, tc := range []struct {
		env, listen, token string
		ok                 bool
	}{
		{config.EnvProduction, "127.0.0.1:8081", "short", false},
		{config.EnvProduction, "127.0.0.1:8081", strings.Repeat("x", 31), false},
		{config.EnvProduction, "127.0.0.1:8081", strings.Repeat("x", 32), true},
		{"development", "127.0.0.1:8081", "short", true},
		{"development", "localhost:8081", "short", true},
		{"development", "0.0.0.0:8081", "short", false},
		{"development", "10.0.0.7:8081", strings.Repeat("x", 31), false},
		{"development", "0.0.0.0:8081", strings.Repeat("x", 32), true},
	} {
		t.Setenv("SLUICE_ADMIN_TOKEN", tc.token)
		cfg := &config.Config{Env: tc.env, AdminListen: tc.listen}
		got, _, err := adminToken(cfg)
		if (err == nil) != tc.ok || (tc.ok && got != tc.token) {
			t.Errorf("%s on %s, %d bytes: %q, %v; want ok %v", tc.env, tc.listen, len(tc.token), got, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "at least 32") {
			t.Errorf("error %q does not say what is needed", err)
		}
	}
}
