package config

import (
	"strings"
	"testing"
	"time"
)

func TestParse_MaxWait(t *testing.T) {
	c, err := Parse([]byte("tiers:\n  - {name: free, percent: 100, max_wait: 2s}\n  - {name: pro, percent: 200}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxWait != DefaultMaxWait || c.Tiers[0].MaxWait != 2*time.Second || c.Tiers[1].MaxWait != 0 {
		t.Fatalf("max_wait %v, tiers %v and %v", c.MaxWait, c.Tiers[0].MaxWait, c.Tiers[1].MaxWait)
	}
	c, err = Parse([]byte("max_wait: 5m\n"), nil)
	if err != nil || c.MaxWait != 5*time.Minute {
		t.Fatalf("max_wait: 5m: %v, %v", c.MaxWait, err)
	}
	for yaml, want := range map[string]string{
		"max_wait: 2h\n": "max_wait: must be from 1ms to 1h",
		"tiers:\n  - {name: free, percent: 100, max_wait: -1s}\n": "tiers[0].max_wait: must be from 1ms to 1h",
	} {
		if _, err := Parse([]byte(yaml), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", yaml, err, want)
		}
	}
}
