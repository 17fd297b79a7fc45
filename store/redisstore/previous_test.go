package redisstore_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestPreviousVersion_KeepsCounters restores the keys the version before
// counters were qualified by their org wrote (testdata/previous.json: each
// key's DUMP, written under the prefix "sluiceprev") under a fresh prefix:
// their default-org budgets and buckets go on where they were.
func TestPreviousVersion_KeepsCounters(t *testing.T) {
	url := redisURL(t)
	b, err := os.ReadFile("testdata/previous.json")
	if err != nil {
		t.Fatal(err)
	}
	var dump map[string]string
	if err := json.Unmarshal(b, &dump); err != nil {
		t.Fatal(err)
	}
	prefix := freshPrefix()
	raw, err := redisstore.RawClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	for key, value := range dump {
		payload, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			t.Fatal(err)
		}
		key = prefix + strings.TrimPrefix(key, "sluiceprev")
		if err := raw.Do(ctx, raw.B().Restore().Key(key).Ttl(0).SerializedValue(string(payload)).Build()).Error(); err != nil {
			t.Fatalf("restore %q: %v", key, err)
		}
	}
	h := harness(t, redisstore.Options{URL: url, PinTime: true, Prefix: prefix})
	storetest.CheckPreviousVersion(t, h, true)
}
