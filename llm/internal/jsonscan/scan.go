// Package jsonscan is a validating, allocation-free JSON scanner that works on byte offsets.
//
// It exists so that request bodies of several megabytes can be bounded and edited without
// decoding them: callers walk the members they care about and skip (while validating) the rest.
// Everything it accepts is accepted by encoding/json's Valid; it rejects nesting deeper than
// MaxDepth, which Valid would accept up to its own larger limit.
package jsonscan

import (
	"encoding/binary"
	"fmt"
)

// MaxDepth is the deepest nesting of objects and arrays accepted.
const MaxDepth = 512

// SyntaxError reports invalid JSON at a byte offset.
type SyntaxError struct {
	Offset int
	Msg    string
}

// Error returns the message with its offset.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.Msg, e.Offset)
}

func syntaxErr(off int, msg string) error { return &SyntaxError{Offset: off, Msg: msg} }

// SkipSpace returns the index of the first byte at or after i that is not JSON white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// Skip validates the value starting at b[i] (i must be at its first byte) and returns the
// index just past it. depth is the nesting depth of the value (1 for a top-level value).
func Skip(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return i, syntaxErr(i, "unexpected end of JSON input")
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := String(b, i)
		return end, err
	case c == '{':
		return Object(b, i, depth, nil)
	case c == '[':
		return Array(b, i, depth, nil)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || ('0' <= c && c <= '9'):
		return Number(b, i)
	default:
		return i, syntaxErr(i, fmt.Sprintf("invalid character %q looking for beginning of value", c))
	}
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, syntaxErr(i, "invalid literal")
	}
	return i + len(lit), nil
}

// IsNull reports whether the value at b[i] is the literal null.
func IsNull(b []byte, i int) bool {
	return len(b)-i >= 4 && string(b[i:i+4]) == "null"
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// special reports whether any byte of x is '"', '\\' or a control character (< 0x20).
func special(x uint64) bool {
	q := x ^ (lsb * '"')
	s := x ^ (lsb * '\\')
	return ((q-lsb)&^q|(s-lsb)&^s|(x-lsb*0x20)&^x)&msb != 0
}

// String validates the string starting at b[i] == '"' and returns the index just past its
// closing quote and whether it contains escape sequences. Its raw content is b[i+1 : end-1].
func String(b []byte, i int) (end int, escaped bool, err error) {
	start := i
	i++
	for {
		for i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return i, escaped, syntaxErr(start, "unterminated string")
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return i, escaped, syntaxErr(start, "unterminated string")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, escaped, syntaxErr(i, "invalid \\u escape")
				}
				i += 6
			default:
				return i, escaped, syntaxErr(i, "invalid escape in string")
			}
		case c < 0x20:
			return i, escaped, syntaxErr(i, "control character in string")
		default:
			i++
		}
	}
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// Number validates the number starting at b[i] and returns the index just past it.
func Number(b []byte, i int) (int, error) {
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, syntaxErr(start, "invalid number")
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, syntaxErr(start, "invalid number")
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, syntaxErr(start, "invalid number")
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, syntaxErr(start, "invalid number")
		}
		i = j
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// Member is one member of an object as seen by Object's callback.
type Member struct {
	// KeyStart and KeyEnd delimit the raw key, without its quotes.
	KeyStart, KeyEnd int
	// Escaped is true when the raw key contains escape sequences.
	Escaped bool
	// Value is the index of the first byte of the member's value.
	Value int
}

// Object validates the object starting at b[i] == '{' and returns the index just past its
// closing brace. For each member it calls fn (when not nil), which returns the index just past
// the value it consumed, or -1 to have Object skip and validate the value. depth is the nesting
// depth of this object.
func Object(b []byte, i, depth int, fn func(m Member) (int, error)) (int, error) {
	if depth > MaxDepth {
		return i, syntaxErr(i, "nesting too deep")
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, syntaxErr(i, "expected object key")
		}
		kend, esc, err := String(b, i)
		if err != nil {
			return kend, err
		}
		j := SkipSpace(b, kend)
		if j >= len(b) || b[j] != ':' {
			return j, syntaxErr(j, "expected ':' after object key")
		}
		v := SkipSpace(b, j+1)
		end := -1
		if fn != nil {
			if end, err = fn(Member{KeyStart: i + 1, KeyEnd: kend - 1, Escaped: esc, Value: v}); err != nil {
				return end, err
			}
		}
		if end < 0 {
			if end, err = Skip(b, v, depth+1); err != nil {
				return end, err
			}
		}
		i = SkipSpace(b, end)
		if i >= len(b) {
			return i, syntaxErr(i, "unexpected end of JSON input")
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return i, syntaxErr(i, "expected ',' or '}' after object value")
		}
	}
}

// Array validates the array starting at b[i] == '[' and returns the index just past its
// closing bracket. For each element it calls fn (when not nil) with the element's index and the
// offset of its first byte; fn returns the index just past the element it consumed, or -1 to
// have Array skip and validate it. depth is the nesting depth of this array.
func Array(b []byte, i, depth int, fn func(n, v int) (int, error)) (int, error) {
	if depth > MaxDepth {
		return i, syntaxErr(i, "nesting too deep")
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for n := 0; ; n++ {
		end := -1
		var err error
		if fn != nil {
			if end, err = fn(n, i); err != nil {
				return end, err
			}
		}
		if end < 0 {
			if end, err = Skip(b, i, depth+1); err != nil {
				return end, err
			}
		}
		i = SkipSpace(b, end)
		if i >= len(b) {
			return i, syntaxErr(i, "unexpected end of JSON input")
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return i, syntaxErr(i, "expected ',' or ']' after array element")
		}
	}
}

// Valid reports whether b holds exactly one JSON value, with optional surrounding white space.
func Valid(b []byte) bool {
	i := SkipSpace(b, 0)
	end, err := Skip(b, i, 1)
	return err == nil && SkipSpace(b, end) == len(b)
}
