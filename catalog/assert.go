package catalog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The attributes a service key may assert per request (Key.Assert). The
// org is never among them: whatever a key asserts stays within its own org.
const (
	AssertWorkspace = "workspace"
	AssertUser      = "user"
	AssertTeam      = "team"
)

// assertable lists the attributes a key may assert, in their usual order.
var assertable = []string{AssertWorkspace, AssertUser, AssertTeam}

// MayAssert reports whether the key may assert attribute (workspace, user
// or team) per request.
func (k Key) MayAssert(attribute string) bool { return slices.Contains(k.Assert, attribute) }

// MayAssertWorkspace reports whether the key may name workspace ws: it may
// assert a workspace, and ws is within AssertWorkspaces (an exact name or
// a prefix ending in "*"; an empty list allows any).
func (k Key) MayAssertWorkspace(ws string) bool {
	if !k.MayAssert(AssertWorkspace) {
		return false
	}
	if len(k.AssertWorkspaces) == 0 {
		return true
	}
	for _, p := range k.AssertWorkspaces {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(ws, prefix) || p == ws {
			return true
		}
	}
	return false
}

// checkAssert validates a key's permission to assert attributes and
// returns it normalised: each attribute once, in the order of assertable;
// each workspace pattern once, in the order given.
func checkAssert(assert, workspaces []string) (attrs, patterns []string, err error) {
	for _, a := range assert {
		a = strings.TrimSpace(a)
		if !slices.Contains(assertable, a) {
			return nil, nil, fmt.Errorf("%w: assert: unknown attribute %q: want workspace, user or team", ErrInvalid, a)
		}
	}
	for _, a := range assertable {
		if slices.ContainsFunc(assert, func(s string) bool { return strings.TrimSpace(s) == a }) {
			attrs = append(attrs, a)
		}
	}
	if len(workspaces) > 0 && !slices.Contains(attrs, AssertWorkspace) {
		return nil, nil, fmt.Errorf("%w: assert_workspaces needs workspace in assert: a key that may not assert a workspace names none", ErrInvalid)
	}
	for _, p := range workspaces {
		p = strings.TrimSpace(p)
		if err := checkWorkspacePattern(p); err != nil {
			return nil, nil, fmt.Errorf("%w: assert_workspaces: %w", ErrInvalid, err)
		}
		if !slices.Contains(patterns, p) {
			patterns = append(patterns, p)
		}
	}
	return attrs, patterns, nil
}

// checkWorkspacePattern accepts an exact workspace name or a prefix ending
// in "*" ("team-*"; "*" alone is any workspace).
func checkWorkspacePattern(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty workspace pattern")
	case len(p) > MaxValueBytes:
		return fmt.Errorf("workspace pattern longer than %d bytes", MaxValueBytes)
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return fmt.Errorf("workspace pattern %q: * may only end a prefix", p)
	case !utf8.ValidString(p) || strings.ContainsFunc(p, unicode.IsControl):
		return fmt.Errorf("workspace pattern %q has control characters or is not UTF-8", p)
	}
	return nil
}

// decodeList reads a JSON array column; empty reads as nil.
func decodeList(column, value string) ([]string, error) {
	if value == "" || value == "[]" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(value), &out); err != nil {
		return nil, fmt.Errorf("%s: %w", column, err)
	}
	return out, nil
}
