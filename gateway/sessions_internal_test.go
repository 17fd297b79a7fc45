package gateway

import (
	"errors"
	"strings"
	"testing"
)

// A session's cost ceiling is reported in dollars, not micro-dollars.
func TestSessionError_CostCeilingInDollars(t *testing.T) {
	for _, tc := range []struct {
		ceiling     string
		used, limit int64
		want        string
	}{
		{"cost", 1_010_000, 1_000_000, "cost ceiling ($1.01 of $1.00 used)"},
		{"turns", 5, 5, "turns ceiling (5 of 5 requests used)"},
	} {
		err := sessionError(&SessionCeilingError{Session: Session{ID: "s1"}, Ceiling: tc.ceiling, Used: tc.used, Limit: tc.limit})
		var ae *apiError
		if !errors.As(err, &ae) || !strings.Contains(ae.message, tc.want) {
			t.Errorf("%s: %v, want a message saying %q", tc.ceiling, err, tc.want)
		}
	}
}

// A ceiling error says a cost ceiling in dollars too, as logs show it.
func TestSessionCeilingError_CostInDollars(t *testing.T) {
	err := &SessionCeilingError{Session: Session{ID: "s1"}, Ceiling: "cost", Used: 2_500_000, Limit: 2_000_000}
	if want := "session s1: cost ceiling reached ($2.50 of $2.00 used)"; err.Error() != want {
		t.Errorf("%q, want %q", err, want)
	}
}
