package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
)

// authenticatorOf is what authenticates the gateway's clients: the API
// keys, behind the JWT issuers of auth.jwt when there are any. The JWKS
// are kept until ctx is done; a change to auth.jwt takes a restart.
func authenticatorOf(ctx context.Context, cfg *config.Config, keys gateway.Authenticator, log *slog.Logger) (gateway.Authenticator, error) {
	if len(cfg.Auth.JWT) == 0 {
		return keys, nil
	}
	opts := gateway.JWTOptions{Next: keys, Logger: log}
	for _, t := range cfg.Tiers {
		opts.Tiers = append(opts.Tiers, t.Name)
	}
	for _, iss := range cfg.Auth.JWT {
		opts.Issuers = append(opts.Issuers, gateway.JWTIssuer{
			Issuer:   iss.Issuer,
			Audience: iss.Audience,
			JWKSURL:  iss.JWKSURL,
			JWKSFile: iss.JWKSFile,
			Org:      iss.Org,
			Claims: gateway.JWTClaims{Org: iss.Claims.Org, Workspace: iss.Claims.Workspace, User: iss.Claims.User,
				Team: iss.Claims.Team, Tier: iss.Claims.Tier, Class: iss.Claims.Class},
		})
	}
	a, err := gateway.NewJWTAuthenticator(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("auth.jwt: %w", err)
	}
	return a, nil
}
