package gateway

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// validAttribute reports whether s may be an identity or attribution value
// taken from a request (an asserted header, a JWT claim, a session id, a
// tag): at most max bytes of valid UTF-8 without control characters. Such
// values become counter keys and ledger columns, and a byte a database
// refuses there (PostgreSQL refuses invalid UTF-8 in text) must be a 400 for
// the one request, not a failed write for everyone's.
func validAttribute(s string, max int) bool {
	return len(s) <= max && utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// checkTags returns a 400 when the X-Sluice-Tags value v is not valid
// UTF-8 or holds control characters. Tags that are valid but too long or
// too many are dropped by parseTags, not refused.
func checkTags(v []byte) error {
	if utf8.Valid(v) && !bytes.ContainsFunc(v, unicode.IsControl) {
		return nil
	}
	return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "invalid_tags", param: HeaderTags,
		message: fmt.Sprintf("The %s header must be comma-separated tags of valid UTF-8 without control characters.", HeaderTags)}
}
