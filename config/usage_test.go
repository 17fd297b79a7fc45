package config

import (
	"testing"
	"time"
)

func TestUsage_CallRetentionOrOff(t *testing.T) {
	off := false
	for _, tc := range []struct {
		u    Usage
		want time.Duration
	}{
		{Usage{}, 90 * 24 * time.Hour},
		{Usage{CallRetention: 7 * 24 * time.Hour}, 7 * 24 * time.Hour},
		{Usage{CallRetention: time.Hour, Calls: &off}, -1},
	} {
		if got := tc.u.CallRetentionOrOff(); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.u, got, tc.want)
		}
	}
}
