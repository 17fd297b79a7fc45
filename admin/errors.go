package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// apiError is an answer other than success: a status, a stable code and a
// sentence for people.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Message }

func errorf(status int, code, format string, args ...any) error {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// errorOf maps any error to what the client is told. It is the one place
// errors become HTTP.
func errorOf(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	msg := strings.ReplaceAll(err.Error(), "catalog: ", "")
	status, code := http.StatusInternalServerError, "internal"
	switch {
	case errors.Is(err, catalog.ErrInvalid):
		status, code = http.StatusBadRequest, "invalid"
	case errors.Is(err, catalog.ErrUnknownKey):
		status, code = http.StatusNotFound, "unknown_key"
	case errors.Is(err, catalog.ErrUnknownRule):
		status, code = http.StatusNotFound, "unknown_rule"
	case errors.Is(err, catalog.ErrUnknownOverride):
		status, code = http.StatusNotFound, "unknown_override"
	case errors.Is(err, catalog.ErrUnknownSubject):
		status, code = http.StatusNotFound, "unknown_subject"
	case errors.Is(err, catalog.ErrUnknownSession):
		status, code = http.StatusNotFound, "unknown_session"
	case errors.Is(err, catalog.ErrUnknownToken):
		status, code = http.StatusNotFound, "unknown_token"
	case errors.Is(err, catalog.ErrRuleExists):
		status, code = http.StatusConflict, "rule_exists"
	case errors.Is(err, catalog.ErrTooManyRules):
		status, code = http.StatusConflict, "too_many_rules"
	case errors.Is(err, catalog.ErrRevokedKey):
		status, code = http.StatusConflict, "key_revoked"
	case errors.Is(err, sluice.ErrStoreUnavailable), errors.Is(err, context.DeadlineExceeded):
		status, code = http.StatusServiceUnavailable, "unavailable"
	}
	if status == http.StatusInternalServerError {
		msg = "internal error"
	}
	return &apiError{Status: status, Code: code, Message: msg}
}

// writeError answers err as {"error":{"code","message"}}.
func (h *Handler) writeError(w http.ResponseWriter, err error) {
	ae := errorOf(err)
	if ae.Status >= 500 {
		h.log.Error("admin: request failed", "err", err)
	}
	writeJSON(w, ae.Status, map[string]any{"error": ae})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// decode reads exactly one JSON value into v, refusing unknown fields,
// wrong types and trailing data with a 400 that says what was wrong.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badBody(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errorf(http.StatusBadRequest, "invalid_body", "the body must hold one JSON object and nothing after it")
	}
	return nil
}

func badBody(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, "invalid_body", "the body is empty: send a JSON object")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, "invalid_body", "the body is not valid JSON: %v", err)
	case errors.As(err, &typ):
		field := jsonPath(typ.Field)
		if field == "" {
			return errorf(http.StatusBadRequest, "invalid_body", "the body must be a JSON object, not %s", typ.Value)
		}
		return errorf(http.StatusBadRequest, "invalid_field", "field %q: want %s, got %s", field, typeName(typ.Type.String()), typ.Value)
	case errors.As(err, &tooBig):
		return errorf(http.StatusRequestEntityTooLarge, "body_too_large", "the body is larger than %d bytes", tooBig.Limit)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errorf(http.StatusBadRequest, "unknown_field", "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return errorf(http.StatusBadRequest, "invalid_body", "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonPath is the path of a field as the client wrote it. encoding/json
// puts the Go names of embedded structs in the path ("RuleJSON.kind" for
// ruleRequest's sluice.RuleJSON); the request bodies' own names are all
// lower case, so a segment with a capital letter is such a name.
func jsonPath(field string) string {
	var kept []string
	for seg := range strings.SplitSeq(field, ".") {
		if strings.ToLower(seg) != seg {
			continue
		}
		kept = append(kept, seg)
	}
	return strings.Join(kept, ".")
}

// typeName says a Go type the way a JSON user thinks of it.
func typeName(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case goType == "string" || strings.HasSuffix(goType, "Kind") || strings.HasSuffix(goType, "Metric") ||
		strings.HasSuffix(goType, "Period") || strings.HasSuffix(goType, "Mode") || strings.HasSuffix(goType, "Policy"):
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.Contains(goType, "Time"):
		return "an RFC 3339 time"
	}
	return "an object"
}
