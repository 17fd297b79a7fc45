package retry

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestClassifyError_SluiceRefusals(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		class Class
		hint  time.Duration
	}{
		{"rate", &sluice.RateLimitError{Refusal: sluice.Refusal{RetryAfter: 1500 * time.Millisecond}}, Throttled, 1500 * time.Millisecond},
		{"busy wrapped", fmt.Errorf("call: %w", &sluice.BusyError{Refusal: sluice.Refusal{RetryAfter: time.Second}}), Throttled, time.Second},
		{"budget", &sluice.BudgetError{}, Terminal, 0},
		{"too large", &sluice.TooLargeError{}, Terminal, 0},
		{"store", &sluice.StoreError{Op: "admit", Err: fmt.Errorf("timeout")}, Transient, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ClassifyError(tt.err)
			if d.Class != tt.class || d.Hint != tt.hint {
				t.Fatalf("ClassifyError(%v) = %+v, want %v with hint %v", tt.err, d, tt.class, tt.hint)
			}
			if tt.class == Terminal {
				if _, retry := (Policy{}).Delay(1, d); retry {
					t.Fatal("a terminal refusal would be retried")
				}
			}
		})
	}
}
