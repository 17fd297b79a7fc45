package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/gateway/event"
	"github.com/valyala/fasthttp"
)

// Request headers a service key may send to say whom a call is for (see
// Principal.Assert). Each replaces that attribute of the key's record for
// the one request; the org is always the key's own.
const (
	HeaderWorkspace = event.HeaderWorkspace
	HeaderUser      = event.HeaderUser
	HeaderTeam      = event.HeaderTeam
)

// The attributes a service key may assert, as Principal.Assert names
// them.
const (
	AssertWorkspace = "workspace"
	AssertUser      = "user"
	AssertTeam      = "team"
)

// MaxAssertedValue bounds an asserted workspace, user or team, in bytes:
// the bound of the same values on a key (catalog.MaxValueBytes, checked by
// internal/catalogsessions' tests).
const MaxAssertedValue = 256

// assertedHeaders pairs each assertable attribute with its header, in the
// order they are checked.
var assertedHeaders = [...]struct{ attribute, header string }{
	{AssertWorkspace, HeaderWorkspace},
	{AssertUser, HeaderUser},
	{AssertTeam, HeaderTeam},
}

// attrSet is a set of the assertable attributes, by their index in
// assertedHeaders.
type attrSet uint8

// The indices of assertedHeaders, for attrSet.has.
const (
	assertedWorkspace = iota
	assertedUser
	assertedTeam
)

func (s attrSet) has(i int) bool { return s&(1<<i) != 0 }

// headers lists the headers of the attributes in s, nil when it is empty.
func (s attrSet) headers() []string {
	var out []string
	for i, a := range assertedHeaders {
		if s.has(i) {
			out = append(out, a.header)
		}
	}
	return out
}

// mayAssert reports whether the principal may assert attribute.
func (p *Principal) mayAssert(attribute string) bool { return slices.Contains(p.Assert, attribute) }

// mayAssertWorkspace reports whether ws is within the principal's
// AssertWorkspaces: an exact name, or a prefix ending in "*". An empty
// list allows any workspace.
func (p *Principal) mayAssertWorkspace(ws string) bool {
	if len(p.AssertWorkspaces) == 0 {
		return true
	}
	for _, pat := range p.AssertWorkspaces {
		if prefix, ok := strings.CutSuffix(pat, "*"); ok && strings.HasPrefix(ws, prefix) || pat == ws {
			return true
		}
	}
	return false
}

// assertIdentity applies the identity headers of a request to who, the
// principal of its key. A header the key may assert replaces that
// attribute; one it may not is ignored and reported in ignored. The org
// never changes. A malformed value is a 400, a workspace outside the key's
// list a 403.
func assertIdentity(h *fasthttp.RequestHeader, who Principal) (_ Principal, asserted, ignored attrSet, err error) {
	for i, a := range assertedHeaders {
		values := h.PeekAll(a.header)
		if len(values) == 0 {
			continue
		}
		if !who.mayAssert(a.attribute) {
			ignored |= 1 << i
			continue
		}
		if len(values) > 1 {
			return Principal{}, 0, 0, errIdentityHeader(a.header, "is sent more than once")
		}
		v, err := parseAssertedValue(values[0])
		if err != nil {
			return Principal{}, 0, 0, errIdentityHeader(a.header, err.Error())
		}
		switch a.attribute {
		case AssertWorkspace:
			if !who.mayAssertWorkspace(v) {
				return Principal{}, 0, 0, errWorkspaceNotAllowed(v)
			}
			who.Workspace = v
		case AssertUser:
			who.User = v
		case AssertTeam:
			who.Team = v
		}
		asserted |= 1 << i
	}
	return who, asserted, ignored, nil
}

// parseAssertedValue reads the value of an identity header: spaces around
// it trimmed, at most MaxAssertedValue bytes, valid UTF-8 without control
// characters (0x1e and 0x1f join the parts of a counter's subject), and not
// empty: the rules a key's own values follow.
func parseAssertedValue(raw []byte) (string, error) {
	v := bytes.TrimSpace(raw)
	switch {
	case len(v) == 0:
		return "", errors.New("is empty")
	case len(v) > MaxAssertedValue:
		return "", fmt.Errorf("is longer than %d bytes", MaxAssertedValue)
	case !utf8.Valid(v):
		return "", errors.New("is not valid UTF-8")
	case bytes.ContainsFunc(v, unicode.IsControl):
		return "", errors.New("contains control characters")
	}
	return string(v), nil
}

func errIdentityHeader(header, problem string) error {
	return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_identity_header", param: header,
		message: fmt.Sprintf("The %s header %s; it must be one name of at most %d bytes, without control characters.", header, problem, MaxAssertedValue)}
}

func errWorkspaceNotAllowed(ws string) error {
	return &apiError{status: 403, typ: "invalid_request_error", anthType: "permission_error", code: "workspace_not_allowed", param: HeaderWorkspace,
		message: fmt.Sprintf("This key may not act for workspace %q: it is not among the workspaces the key may assert.", ws)}
}
