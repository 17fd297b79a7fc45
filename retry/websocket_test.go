package retry_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/retry"
)

// seedCloseHandler is the close handler of reference 001 (a live audio
// interview product), in Go: it stops on a quota close and reconnects on
// any other close but a normal one.
//
//	const reason = (event.reason || '').toLowerCase();
//	const isQuotaError = event.code === 1011 && (
//	  reason.includes('quota') ||
//	  reason.includes('exceeded') ||
//	  reason.includes('resource_exhausted')
//	);
//	if (isQuotaError) return showUnavailable();  // terminal: do not retry
//	if (event.code !== 1000 && attempts < maxReconnects) { reconnect }
func seedCloseHandler(code int, reason string) (quota, reconnect bool) {
	r := strings.ToLower(reason)
	quota = code == 1011 && (strings.Contains(r, "quota") || strings.Contains(r, "exceeded") || strings.Contains(r, "resource_exhausted"))
	return quota, !quota && code != 1000
}

func TestClassifyClose_AgreesWithTheSeedsCloseHandler(t *testing.T) {
	codes := []int{1000, 1001, 1002, 1006, 1008, 1009, 1011, 1012, 1013, 4000}
	reasons := []string{"", "quota exceeded: session token ceiling reached", "Quota Exceeded", "RESOURCE_EXHAUSTED",
		"budget exceeded", "provider connection lost", "limit store unavailable; retry later", "internal error"}
	for _, code := range codes {
		for _, reason := range reasons {
			quota, reconnect := seedCloseHandler(code, reason)
			d := retry.ClassifyClose(code, reason)
			if (d.Class == retry.Terminal) != quota || d.Retryable() != reconnect {
				t.Errorf("close %d %q: class %s, retryable %v; the seed: quota %v, reconnect %v", code, reason, d.Class, d.Retryable(), quota, reconnect)
			}
		}
	}
}

func TestClassifyClose_Classes(t *testing.T) {
	for _, tc := range []struct {
		code   int
		reason string
		want   retry.Class
	}{
		{1000, "", retry.Success},
		{1011, "quota exceeded: session wall-clock ceiling reached", retry.Terminal},
		{1011, "provider connection lost", retry.Transient},
		{1013, "limit store unavailable; retry later", retry.Transient},
		// The quota words count only on 1011, as the seed reads them.
		{1008, "quota exceeded", retry.Transient},
		{1006, "", retry.Transient},
	} {
		if got := retry.ClassifyClose(tc.code, tc.reason).Class; got != tc.want {
			t.Errorf("close %d %q: %s, want %s", tc.code, tc.reason, got, tc.want)
		}
	}
}
