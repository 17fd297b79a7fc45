package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// Production refuses a short admin token; development takes any.
func TestAdminToken_ProductionNeeds32Bytes(t *testing.T) {
	for _, tc := range []struct {
		env, token string
		ok         bool
	}{
		{config.EnvProduction, "short", false},
		{config.EnvProduction, strings.Repeat("x", 31), false},
		{config.EnvProduction, strings.Repeat("x", 32), true},
		{"development", "short", true},
	} {
		t.Setenv("SLUICE_ADMIN_TOKEN", tc.token)
		cfg := &config.Config{Env: tc.env, AdminListen: "127.0.0.1:8081"}
		got, _, err := adminToken(cfg)
		if (err == nil) != tc.ok || (tc.ok && got != tc.token) {
			t.Errorf("%s, %d bytes: %q, %v; want ok %v", tc.env, len(tc.token), got, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "at least 32") {
			t.Errorf("error %q does not say what is needed", err)
		}
	}
}
