package config

import "time"

// DefaultCallRetention is how long per-call records are kept when
// usage.call_retention is not set: 90 days.
const DefaultCallRetention = 90 * 24 * time.Hour

// Usage configures the ledger's per-call records: one row per settled call
// (time, request id, key, workspace, model, route, reserved, settled usage
// and cost, outcome; never a prompt or an answer).
type Usage struct {
	// CallRetention is how long a call record is kept before the
	// background pruner deletes it (DefaultCallRetention when unset).
	CallRetention time.Duration `yaml:"call_retention,omitempty"`
	// Calls false keeps no call records (the daily ledger is kept
	// whatever it says). Unset means true.
	Calls *bool `yaml:"calls,omitempty"`
}

// CallRetentionOrOff returns how long call records are kept, or a negative
// duration when they are off.
func (u *Usage) CallRetentionOrOff() time.Duration {
	if u.Calls != nil && !*u.Calls {
		return -1
	}
	if u.CallRetention == 0 {
		return DefaultCallRetention
	}
	return u.CallRetention
}

func (v *checker) usage() {
	if r := v.c.Usage.CallRetention; r < 0 {
		v.add("usage.call_retention", "must be positive, got %v (usage.calls: false keeps no call records)", r)
	}
}
