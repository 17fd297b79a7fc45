package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestCatalog_KeyClassAndMaxWait checks that a key's class and max wait
// are stored, read back by every path (Authenticate from the database and
// from its cache, GetKey, ListKeys, another process), changed by
// UpdateKey alone when given, and audited.
func TestCatalog_KeyClassAndMaxWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		secret, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", Tier: "free", Class: "batch", MaxWait: sluice.Duration(200 * time.Millisecond)}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if k.Class != "batch" || time.Duration(k.MaxWait) != 200*time.Millisecond {
			t.Fatalf("created key = %+v", k)
		}
		same := func(what string, got Key, class string, maxWait time.Duration) {
			t.Helper()
			if got.ID != k.ID || got.Class != class || time.Duration(got.MaxWait) != maxWait {
				t.Fatalf("%s: key %s has class %q, max wait %v; want %q, %v", what, got.ID, got.Class, time.Duration(got.MaxWait), class, maxWait)
			}
		}
		for range 2 { // from the database, then from the cache
			auth, err := c.Authenticate(ctx, secret)
			if err != nil {
				t.Fatal(err)
			}
			same("Authenticate", auth, "batch", 200*time.Millisecond)
		}
		got, err := c.GetKey(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		same("GetKey", got, "batch", 200*time.Millisecond)

		// Another field changed: class and max wait stay.
		name := "laptop"
		if got, err = c.UpdateKey(ctx, k.ID, KeyUpdate{Name: &name}, "ops"); err != nil {
			t.Fatal(err)
		}
		same("UpdateKey of the name", got, "batch", 200*time.Millisecond)
		// Changed, and seen at once through the cache.
		class, wait := "interactive", 2*time.Second
		if got, err = c.UpdateKey(ctx, k.ID, KeyUpdate{Class: &class, MaxWait: &wait}, "ops"); err != nil {
			t.Fatal(err)
		}
		same("UpdateKey", got, "interactive", 2*time.Second)
		auth, err := c.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		same("Authenticate after UpdateKey", auth, "interactive", 2*time.Second)

		// Another process sharing the database reads the same.
		other, err := be.open(Options{FlushInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		list, err := other.ListKeys(ctx, "w")
		if err != nil || len(list) != 1 {
			t.Fatalf("ListKeys = %v, %v", list, err)
		}
		same("ListKeys of another catalog", list[0], "interactive", 2*time.Second)

		// Back to the tier's: empty class, zero wait.
		none, zero := "", time.Duration(0)
		if got, err = c.UpdateKey(ctx, k.ID, KeyUpdate{Class: &none, MaxWait: &zero}, "ops"); err != nil {
			t.Fatal(err)
		}
		same("UpdateKey to the tier's", got, "", 0)

		entries, err := c.ListAudit(ctx, AuditQuery{Target: keyTarget(k.ID)})
		if err != nil {
			t.Fatal(err)
		}
		var created, changed string
		for _, e := range entries {
			switch {
			case e.Action == ActionKeyCreate:
				created = string(e.After.(json.RawMessage))
			case e.Action == ActionKeyUpdate && strings.Contains(string(e.After.(json.RawMessage)), `"interactive"`):
				changed = string(e.Before.(json.RawMessage)) + " -> " + string(e.After.(json.RawMessage))
			}
		}
		if !strings.Contains(created, `"class":"batch"`) || !strings.Contains(created, `"max_wait":"200ms"`) {
			t.Errorf("key.create audit: %s", created)
		}
		if !strings.Contains(changed, `"class":"batch","max_wait":"200ms"`) || !strings.Contains(changed, `"class":"interactive","max_wait":"2s"`) {
			t.Errorf("key.update audit: %s", changed)
		}
	})
}

// TestCatalog_KeyClassAndMaxWaitValidated checks that a class that is no
// name and a max wait outside 0 to MaxKeyWait are refused, on creation and
// on update, and change nothing.
func TestCatalog_KeyClassAndMaxWaitValidated(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		_, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", Class: "batch"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			class   string
			maxWait time.Duration
			says    string
		}{
			{"low priority", 0, "class \"low priority\" must not contain spaces"},
			{"a/b", 0, "must not contain spaces, slashes"},
			{"a\x00b", 0, "control characters"},
			{strings.Repeat("c", 257), 0, "at most 256"},
			{"", -time.Second, "max_wait must be from 0"},
			{"", 2 * time.Hour, "to 1h0m0s, got 2h0m0s"},
		} {
			_, _, err := c.CreateKey(ctx, Key{Workspace: "w", User: "v", Class: tc.class, MaxWait: sluice.Duration(tc.maxWait)}, "admin")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("CreateKey with class %q, max wait %v: %v, want ErrInvalid saying %q", tc.class, tc.maxWait, err, tc.says)
			}
			_, err = c.UpdateKey(ctx, k.ID, KeyUpdate{Class: &tc.class, MaxWait: &tc.maxWait}, "admin")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("UpdateKey with class %q, max wait %v: %v, want ErrInvalid saying %q", tc.class, tc.maxWait, err, tc.says)
			}
		}
		list, err := c.ListKeys(ctx, "w")
		if err != nil || len(list) != 1 || list[0].Class != "batch" || list[0].MaxWait != 0 {
			t.Fatalf("after the refusals: %+v, %v", list, err)
		}
	})
}
