// Package names checks the names operators give to stored rules and to
// priority classes: one charset for both, so that a class reads in an
// admin path, a message or a metric's label as a rule's name does.
package names

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxBytes bounds a name, as the catalog bounds an identity value.
const MaxBytes = 256

// Check refuses a name that is empty, longer than MaxBytes, not valid
// UTF-8, or that holds a space, a slash or a control character (a slash
// would split an admin path, a space a log's or a header's list).
func Check(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > MaxBytes:
		return fmt.Errorf("is %d bytes, at most %d", len(name), MaxBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%q is not valid UTF-8", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r == '/' || unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fmt.Errorf("%q must not contain spaces, slashes or control characters", name)
	}
	return nil
}
