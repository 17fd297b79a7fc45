package jsonscan

import "testing"

// Count reads a token count: absent is 0, and a value no honest peer sends
// (negative, fractional, not a number) is -1, never 0; past int64 it
// saturates, which no call's bound admits.
func TestCount_RefusesImpossibleValues(t *testing.T) {
	for _, tc := range []struct {
		json string
		want int64
	}{
		{`7`, 7},
		{`0`, 0},
		{`9223372036854775807`, 9223372036854775807},
		{`9223372036854775808`, 9223372036854775807}, // saturated: no call's bound holds it
		{`-5`, -1},
		{`10.5`, -1},
		{`1e3`, -1},
		{`"12"`, -1},
	} {
		if got := Count([]byte(tc.json), 0); got != tc.want {
			t.Errorf("Count(%s) = %d, want %d", tc.json, got, tc.want)
		}
	}
	if got := Count([]byte(`{}`), -1); got != 0 {
		t.Errorf("Count of an absent value = %d, want 0", got)
	}
}
