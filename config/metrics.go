package config

import (
	"fmt"
	"strings"
)

// Metrics shapes what /metrics exports beyond its bounded series.
type Metrics struct {
	// HeadroomWorkspaces lists the workspaces ("acme", or "org/acme" for
	// one outside the default org) whose per-workspace rules get headroom
	// gauges. Workspaces are unbounded, so none is exported unless listed;
	// rules on the whole deployment (subject global or server) always are.
	HeadroomWorkspaces []string `yaml:"headroom_workspaces,omitempty"`
}

// WorkspaceRef names a workspace within its org.
type WorkspaceRef struct{ Org, Workspace string }

// HeadroomWorkspaces returns Metrics.HeadroomWorkspaces parsed, the org
// "default" when an entry names none.
func (c *Config) HeadroomWorkspaces() []WorkspaceRef {
	out := make([]WorkspaceRef, 0, len(c.Metrics.HeadroomWorkspaces))
	for _, s := range c.Metrics.HeadroomWorkspaces {
		org, ws, ok := strings.Cut(s, "/")
		if !ok {
			org, ws = "default", s
		}
		out = append(out, WorkspaceRef{Org: org, Workspace: ws})
	}
	return out
}

func (v *checker) metrics() {
	seen := map[string]bool{}
	for i, s := range v.c.Metrics.HeadroomWorkspaces {
		field := fmt.Sprintf("metrics.headroom_workspaces[%d]", i)
		org, ws, cut := strings.Cut(s, "/")
		if !cut {
			org, ws = "default", s
		}
		switch {
		case strings.TrimSpace(ws) == "" || strings.TrimSpace(org) == "" || strings.Contains(ws, "/"):
			v.add(field, `want a workspace ("acme") or an org and a workspace ("org/acme"), got %q`, s)
		case seen[org+"/"+ws]:
			v.add(field, "workspace %q is listed twice", s)
		}
		seen[org+"/"+ws] = true
	}
}
