// Package reqparse holds what the request parsers of llm/openai and llm/anthropic share: the
// walk over the top-level object, typed field readers that answer with llm.RequestError, the
// input estimate, and in-place body edits.
package reqparse

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

// Keys matches the keys of one object against a fixed list of names.
type Keys struct {
	Names []string
	seen  uint64
	buf   []byte
}

// Match returns the index in Names of the member's key, or -1. A key that repeats a name, or
// that differs from one only by case (encoding/json matches keys case-insensitively, so some
// providers would read it as that name) is an error: either would let a client hide a value
// from the gateway that the provider then uses.
func (k *Keys) Match(b []byte, m jsonscan.Member) (int, error) {
	key := b[m.KeyStart:m.KeyEnd]
	if m.Escaped {
		k.buf = jsonscan.Unescape(k.buf[:0], key)
		key = k.buf
	}
	for i, name := range k.Names {
		if string(key) == name {
			if k.seen&(1<<i) != 0 {
				return -1, &llm.RequestError{Param: name, Message: fmt.Sprintf("Duplicate field '%s' in the request body.", name)}
			}
			k.seen |= 1 << i
			return i, nil
		}
	}
	for _, name := range k.Names {
		if len(key) >= len(name)/2 && len(key) <= 3*len(name) && bytes.EqualFold(key, []byte(name)) {
			return -1, &llm.RequestError{Param: name, Message: fmt.Sprintf("Unrecognized field '%s': did you mean '%s'? Field names are case-sensitive.", key, name)}
		}
	}
	return -1, nil
}

// Syntax turns a scanner error into the request error for an unparsable body.
func Syntax(err error) error {
	var re *llm.RequestError
	if errors.As(err, &re) {
		return err
	}
	return &llm.RequestError{Message: "We could not parse the JSON body of your request: " + err.Error() + ".", Err: err}
}

// TypeError is the error for a field of the wrong JSON type.
func TypeError(param, want string, b []byte, v int) error {
	return &llm.RequestError{Param: param, Message: fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, kind(b, v))}
}

func kind(b []byte, v int) string {
	if v >= len(b) {
		return "nothing"
	}
	switch c := b[v]; {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	default:
		return "a number"
	}
}

// Object checks that the body is one JSON object and walks its members with fn; it returns the
// offset of the opening brace.
func Object(b []byte, fn func(m jsonscan.Member) (int, error)) (int, error) {
	start := jsonscan.SkipSpace(b, 0)
	if start >= len(b) || b[start] != '{' {
		if jsonscan.Valid(b) {
			return start, &llm.RequestError{Message: "The request body must be a JSON object."}
		}
		return start, &llm.RequestError{Message: "We could not parse the JSON body of your request: the body is not JSON."}
	}
	end, err := jsonscan.Object(b, start, 1, fn)
	if err != nil {
		return start, Syntax(err)
	}
	if jsonscan.SkipSpace(b, end) != len(b) {
		return start, &llm.RequestError{Message: "We could not parse the JSON body of your request: unexpected data after the top-level object."}
	}
	return start, nil
}

// String reads a string field that must not be null; it returns the unescaped value.
func String(b []byte, v int, param string) (string, int, error) {
	if v >= len(b) || b[v] != '"' {
		if _, err := jsonscan.Skip(b, v, 2); err != nil {
			return "", v, Syntax(err)
		}
		return "", v, TypeError(param, "a string", b, v)
	}
	end, esc, err := jsonscan.String(b, v)
	if err != nil {
		return "", end, Syntax(err)
	}
	raw := b[v+1 : end-1]
	if esc {
		return string(jsonscan.Unescape(nil, raw)), end, nil
	}
	return string(raw), end, nil
}

// Bool reads a boolean field; null reads as false.
func Bool(b []byte, v int, param string) (bool, int, error) {
	switch {
	case bytes.HasPrefix(b[v:], []byte("true")):
		return true, v + 4, nil
	case bytes.HasPrefix(b[v:], []byte("false")):
		return false, v + 5, nil
	case jsonscan.IsNull(b, v):
		return false, v + 4, nil
	}
	if _, err := jsonscan.Skip(b, v, 2); err != nil {
		return false, v, Syntax(err)
	}
	return false, v, TypeError(param, "a boolean", b, v)
}

// Int reads an integer field; null is reported with null true.
func Int(b []byte, v int, param string) (n int64, null bool, end int, err error) {
	if jsonscan.IsNull(b, v) {
		return 0, true, v + 4, nil
	}
	if v < len(b) && (b[v] == '-' || ('0' <= b[v] && b[v] <= '9')) {
		n, end, isInt, err := jsonscan.Int(b, v)
		if err != nil {
			return 0, false, end, Syntax(err)
		}
		if !isInt {
			return 0, false, end, &llm.RequestError{Param: param, Message: fmt.Sprintf("Invalid type for '%s': expected an integer, but got a decimal number instead.", param)}
		}
		return n, false, end, nil
	}
	if _, err := jsonscan.Skip(b, v, 2); err != nil {
		return 0, false, v, Syntax(err)
	}
	return 0, false, v, TypeError(param, "an integer", b, v)
}

// OutputCap reads an output cap field: null, or an integer in [1, 2^31-1].
func OutputCap(b []byte, v int, param string) (n int64, null bool, end int, err error) {
	n, null, end, err = Int(b, v, param)
	if err != nil || null {
		return n, null, end, err
	}
	if n < 1 {
		return 0, false, end, &llm.RequestError{Param: param, Message: fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", param, n)}
	}
	if n > llm.MaxOutputTokensLimit {
		return 0, false, end, &llm.RequestError{Param: param, Message: fmt.Sprintf("Invalid '%s': integer above maximum value. Expected a value <= %d, but got %s instead.", param, llm.MaxOutputTokensLimit, b[v:end])}
	}
	return n, false, end, nil
}

// RequireModel checks that a model was named.
func RequireModel(seen bool, model string) error {
	if !seen {
		return &llm.RequestError{Param: "model", Message: "Missing required parameter: 'model'."}
	}
	if model == "" {
		return &llm.RequestError{Param: "model", Message: "Invalid 'model': empty string. Expected a model name."}
	}
	return nil
}

// Tools counts the tool definitions of the array at b[v] into bound: each costs its JSON
// bytes at llm.BytesPerToken plus llm.ToolOverheadTokens.
func Tools(b []byte, v int, param string, bound *llm.Bound) (int, error) {
	if jsonscan.IsNull(b, v) {
		return v + 4, nil
	}
	if v >= len(b) || b[v] != '[' {
		if _, err := jsonscan.Skip(b, v, 2); err != nil {
			return v, Syntax(err)
		}
		return v, TypeError(param, "an array", b, v)
	}
	end, err := jsonscan.Array(b, v, 2, func(_, e int) (int, error) {
		end, err := jsonscan.Skip(b, e, 3)
		if err != nil {
			return end, err
		}
		bound.Tools++
		bound.ToolTokens += llm.TokensForBytes(int64(end-e)) + llm.ToolOverheadTokens
		return end, nil
	})
	if err != nil {
		return end, Syntax(err)
	}
	return end, nil
}

// Text hands the unescaped content of the raw string b[v:end] to fn, reusing buf.
func Text(fn llm.TextFunc, buf *[]byte, b []byte, v, end int, escaped bool) {
	if fn == nil {
		return
	}
	raw := b[v+1 : end-1]
	if escaped {
		*buf = jsonscan.Unescape((*buf)[:0], raw)
		raw = *buf
	}
	fn(raw)
}

// Finish computes InputTokens from the parts of the estimate.
func Finish(bound *llm.Bound) {
	bound.InputTokens = llm.TokensForBytes(bound.PromptBytes) + bound.ImageTokens + bound.ToolTokens + bound.TokenIDs
}

// Edit replaces body[Start:End] with Text; Start == End inserts.
type Edit struct {
	Start, End int
	Text       []byte
}

// Splice applies edits, which must be sorted by Start and must not overlap, and returns a new
// body. The body itself is not modified.
func Splice(body []byte, edits ...Edit) []byte {
	n := len(body)
	for _, e := range edits {
		n += len(e.Text) - (e.End - e.Start)
	}
	out := make([]byte, 0, n)
	prev := 0
	for _, e := range edits {
		out = append(out, body[prev:e.Start]...)
		out = append(out, e.Text...)
		prev = e.End
	}
	return append(out, body[prev:]...)
}

// Insert returns the edit that inserts members (the text of one or more members, such as
// `"a":1,"b":2`) at the start of the object whose opening brace is at body[obj].
func Insert(body []byte, obj int, members []byte) Edit {
	text := members
	if j := jsonscan.SkipSpace(body, obj+1); j < len(body) && body[j] != '}' {
		text = append(text[:len(text):len(text)], ',')
	}
	return Edit{Start: obj + 1, End: obj + 1, Text: text}
}

// Member appends the text of the member "name":value to dst, after a comma when dst is not
// empty.
func Member(dst []byte, name string, value []byte) []byte {
	if len(dst) > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return append(dst, value...)
}

// SetCap returns body with the output cap whose value is at span set to n, or the field
// inserted first in the object at body[obj] when span is absent.
func SetCap(body []byte, obj int, span llm.Span, field string, n int64) []byte {
	if span.Present() {
		return Splice(body, Edit{Start: span.Start, End: span.End, Text: IntText(n)})
	}
	return Splice(body, Insert(body, obj, Member(nil, field, IntText(n))))
}

// KeyIs reports whether the member's key is name.
func KeyIs(b []byte, m jsonscan.Member, name string) bool {
	raw := b[m.KeyStart:m.KeyEnd]
	if !m.Escaped {
		return string(raw) == name
	}
	return string(jsonscan.Unescape(nil, raw)) == name
}

// IsNullSpan reports whether the span holds the literal null.
func IsNullSpan(body []byte, s llm.Span) bool {
	return s.Present() && jsonscan.IsNull(body, s.Start)
}

// IntText is the JSON text of n.
func IntText(n int64) []byte { return strconv.AppendInt(nil, n, 10) }
