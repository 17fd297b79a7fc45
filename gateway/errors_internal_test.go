package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The refusal of a call its provider's rate limit would refuse says when
// to retry in words and at what instant, never a Go duration.
func TestErrPaced_SaysWhenInWords(t *testing.T) {
	var ae *apiError
	if !errors.As(errPaced("m", 90*time.Second), &ae) || !strings.Contains(ae.message, "retry in 1 minute 30 seconds (at ") || strings.Contains(ae.message, "1m30s") {
		t.Errorf("message %q", ae.message)
	}
}
