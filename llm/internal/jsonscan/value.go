package jsonscan

import (
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// Int reads the number starting at b[i]. isInt is false when the number has a fraction or an
// exponent. Values beyond the int64 range saturate at math.MaxInt64 or math.MinInt64.
func Int(b []byte, i int) (v int64, end int, isInt bool, err error) {
	end, err = Number(b, i)
	if err != nil {
		return 0, end, false, err
	}
	j := i
	neg := false
	if b[j] == '-' {
		neg = true
		j++
	}
	var u uint64
	for ; j < end && '0' <= b[j] && b[j] <= '9'; j++ {
		if u > (math.MaxUint64-9)/10 {
			u = math.MaxUint64
			continue
		}
		u = u*10 + uint64(b[j]-'0')
	}
	if j != end {
		return 0, end, false, nil
	}
	switch {
	case neg && u > math.MaxInt64:
		return math.MinInt64, end, true, nil
	case neg:
		return -int64(u), end, true, nil
	case u > math.MaxInt64:
		return math.MaxInt64, end, true, nil
	default:
		return int64(u), end, true, nil
	}
}

// Unescape appends the decoded form of the raw string content raw (the bytes between the quotes
// of a string that String accepted) to dst and returns it. Invalid surrogates become U+FFFD, as
// encoding/json decodes them.
func Unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			j := i + 1
			for j < len(raw) && raw[j] != '\\' {
				j++
			}
			dst = append(dst, raw[i:j]...)
			i = j
			continue
		}
		if i+1 >= len(raw) {
			return dst
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(raw, i+2)
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := hex4(raw, i+2)
				if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						dst = utf8.AppendRune(dst, dec)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}

func hex4(raw []byte, i int) rune {
	if len(raw)-i < 4 {
		return utf8.RuneError
	}
	var r rune
	for _, c := range raw[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return utf8.RuneError
		}
		r = r<<4 | rune(c)
	}
	return r
}

// errFound stops an Object walk early once Lookup has what it wants.
var errFound = &SyntaxError{Msg: "found"}

// At returns b[i], or 0 when i is out of range.
func At(b []byte, i int) byte {
	if i < 0 || i >= len(b) {
		return 0
	}
	return b[i]
}

// Lookup returns the offset of the value of the first member named key (compared unescaped)
// of the object at b[i], or -1 when the object has no such member or is not valid up to it.
// A returned offset is always inside b.
func Lookup(b []byte, i int, key string) int {
	if i < 0 || i >= len(b) || b[i] != '{' {
		return -1
	}
	found := -1
	Object(b, i, 1, func(m Member) (int, error) {
		raw := b[m.KeyStart:m.KeyEnd]
		if (!m.Escaped && string(raw) == key) || (m.Escaped && string(Unescape(nil, raw)) == key) {
			if m.Value < len(b) {
				found = m.Value
			}
			return m.Value, errFound
		}
		return -1, nil
	})
	return found
}

// Count reads the non-negative integer value at b[v]: 0 when there is no
// value (v out of range), -1 when the value is anything but a non-negative
// integer (a negative, a fraction, a string): a count no honest peer sends,
// for the caller to refuse rather than read as nothing. An integer past
// int64 saturates at its largest value.
func Count(b []byte, v int) int64 {
	if v < 0 || v >= len(b) {
		return 0
	}
	n, _, isInt, err := Int(b, v)
	if err != nil || !isInt || n < 0 {
		return -1
	}
	return n
}

// StringAt returns the raw content of the string value at b[v] (unescaped when it has
// escapes), or nil when b[v] is not a valid string.
func StringAt(b []byte, v int) []byte {
	if v < 0 || v >= len(b) || b[v] != '"' {
		return nil
	}
	end, esc, err := String(b, v)
	if err != nil {
		return nil
	}
	if esc {
		return Unescape(nil, b[v+1:end-1])
	}
	return b[v+1 : end-1]
}
