package catalog

import (
	"fmt"
	"unicode"
)

// MaxValueBytes bounds an identity value (org, workspace, team, user,
// tier) stored on a key or a rule.
const MaxValueBytes = 256

// checkValue refuses an identity value the engine could not count apart
// from others: control characters (0x1e and 0x1f join the parts of a
// counter's subject) or more than MaxValueBytes.
func checkValue(field, v string) error {
	if len(v) > MaxValueBytes {
		return fmt.Errorf("%s is %d bytes, at most %d", field, len(v), MaxValueBytes)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s %q contains a control character", field, v)
		}
	}
	return nil
}
