package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCatalog_CreateAndAuthenticate(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		secret, k, err := c.CreateKey(ctx, Key{Workspace: "acme", User: "ada", Team: "ml", Tier: "new", Name: "laptop",
			AllowedModels: []string{"gpt-x"}}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, "sk-sluice-"+k.ID+"-") || len(secret) != secretLen {
			t.Fatalf("secret %q is not sk-sluice-<id>-<random> for id %q", secret, k.ID)
		}
		if k.Org != "default" || !k.CreatedAt.Equal(clock.Now()) || !k.RevokedAt.IsZero() {
			t.Fatalf("created key = %+v", k)
		}
		got, err := c.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != k.ID || got.Workspace != "acme" || got.User != "ada" || got.Team != "ml" || got.Tier != "new" ||
			got.Name != "laptop" || !slices.Equal(got.AllowedModels, []string{"gpt-x"}) || !got.CreatedAt.Equal(k.CreatedAt) {
			t.Fatalf("Authenticate = %+v, want %+v", got, k)
		}
		if !got.AllowsModel("gpt-x") || got.AllowsModel("gpt-y") || !(Key{}).AllowsModel("any") {
			t.Fatal("AllowsModel disagrees with AllowedModels")
		}
		// The returned slice is the caller's own: changing it leaves the cache alone.
		got.AllowedModels[0] = "changed"
		again, err := c.Authenticate(ctx, secret)
		if err != nil || again.AllowedModels[0] != "gpt-x" {
			t.Fatalf("second Authenticate = %+v, %v", again, err)
		}
	})
}

func TestCatalog_CreateKeyValidates(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		for _, tc := range []struct {
			name  string
			key   Key
			actor string
		}{
			{"no workspace", Key{User: "u"}, "admin"},
			{"no user", Key{Workspace: "w"}, "admin"},
			{"no actor", Key{Workspace: "w", User: "u"}, ""},
			{"expired at birth", Key{Workspace: "w", User: "u", ExpiresAt: clock.Now()}, "admin"},
		} {
			if _, _, err := c.CreateKey(ctx, tc.key, tc.actor); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
			}
		}
	})
}

func TestCatalog_AuthenticateRefuses(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		secret, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		// Warm the cache, so forgeries are checked against it as well.
		if _, err := c.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		randomPart := secret[len(secret)-secretRandLen:]
		forged := secret[:len(secret)-secretRandLen] + strings.Repeat("A", secretRandLen)
		flipped := []byte(secret)
		flipped[len(flipped)-1] ^= 1
		for _, s := range []string{
			"",
			"sk-sluice-",
			forged,
			string(flipped),
			"sk-sluice-" + strings.Repeat("a", keyIDLen) + "-" + randomPart, // well-formed, no such ID
			secret + "x",
			secret[:len(secret)-1],
			strings.ToUpper(secret[:10]) + secret[10:],
			"sk-sluice-" + strings.ToUpper(k.ID) + "-" + randomPart,
			strings.Replace(secret, "-"+randomPart, "_"+randomPart, 1),
			secret[:len(secret)-1] + "-",
		} {
			if _, err := c.Authenticate(ctx, s); !errors.Is(err, ErrUnknownKey) {
				t.Errorf("Authenticate(%q): err = %v, want ErrUnknownKey", s, err)
			}
		}
	})
}

func TestCatalog_RevokeKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		secret, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Authenticate(ctx, secret); err != nil { // cached now
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		if err := c.RevokeKey(ctx, k.ID, "admin"); err != nil {
			t.Fatal(err)
		}
		// The cache is dropped at once, within the TTL.
		if _, err := c.Authenticate(ctx, secret); !errors.Is(err, ErrRevokedKey) {
			t.Fatalf("Authenticate after revoke: err = %v, want ErrRevokedKey", err)
		}
		keys, err := c.ListKeys(ctx, "w")
		if err != nil || len(keys) != 1 || !keys[0].RevokedAt.Equal(clock.Now()) {
			t.Fatalf("ListKeys = %+v, %v; want the key revoked at %v", keys, err, clock.Now())
		}
		// Revoking again changes nothing and writes no audit entry.
		clock.Advance(time.Second)
		if err := c.RevokeKey(ctx, k.ID, "admin"); err != nil {
			t.Fatal(err)
		}
		if keys, _ := c.ListKeys(ctx, "w"); !keys[0].RevokedAt.Equal(clock.Now().Add(-time.Second)) {
			t.Fatalf("second revoke moved RevokedAt to %v", keys[0].RevokedAt)
		}
		if entries, _ := c.ListAudit(ctx, AuditQuery{Action: ActionKeyRevoke}); len(entries) != 1 {
			t.Fatalf("revoke audit entries = %d, want 1", len(entries))
		}
		if err := c.RevokeKey(ctx, "nosuchkey234", "admin"); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("RevokeKey(unknown): err = %v, want ErrUnknownKey", err)
		}
		if _, err := c.RotateKey(ctx, k.ID, "admin"); !errors.Is(err, ErrRevokedKey) {
			t.Fatalf("RotateKey(revoked): err = %v, want ErrRevokedKey", err)
		}
	})
}

func TestCatalog_RotateKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		old, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", Tier: "gold"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Authenticate(ctx, old); err != nil { // cached now
			t.Fatal(err)
		}
		secret, err := c.RotateKey(ctx, k.ID, "ops")
		if err != nil {
			t.Fatal(err)
		}
		if secret == old {
			t.Fatal("RotateKey returned the old secret")
		}
		if _, err := c.Authenticate(ctx, old); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("old secret after rotation: err = %v, want ErrUnknownKey", err)
		}
		got, err := c.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != k.ID || got.Tier != "gold" || got.User != "u" {
			t.Fatalf("rotated key = %+v, want the identity of %+v", got, k)
		}
		if _, err := c.RotateKey(ctx, "nosuchkey234", "ops"); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("RotateKey(unknown): err = %v, want ErrUnknownKey", err)
		}
	})
}

func TestCatalog_ExpiredKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, clock := be.openTest(t)
		ctx := context.Background()
		secret, _, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", ExpiresAt: clock.Now().Add(time.Minute)}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute) // expiry is exclusive; the cached entry has expired too
		if _, err := c.Authenticate(ctx, secret); !errors.Is(err, ErrExpiredKey) {
			t.Fatalf("Authenticate at expiry: err = %v, want ErrExpiredKey", err)
		}
	})
}

func TestCatalog_ExpiredKeyRefusedFromCache(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		clock := newFakeClock()
		c, err := be.open(Options{Now: clock.Now, CacheTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		secret, _, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", ExpiresAt: clock.Now().Add(time.Second)}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		if _, err := c.Authenticate(ctx, secret); !errors.Is(err, ErrExpiredKey) {
			t.Fatalf("cached key past expiry: err = %v, want ErrExpiredKey", err)
		}
	})
}

// AuthenticateCached answers what needs no database (a malformed secret, a
// cached key, a cached key past its expiry) and leaves the rest to
// Authenticate.
func TestCatalog_AuthenticateCached(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		clock := newFakeClock()
		c, err := be.open(Options{Now: clock.Now, CacheTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		secret, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", ExpiresAt: clock.Now().Add(time.Minute)}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := c.AuthenticateCached("not-a-key"); !ok || !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("malformed secret: ok %v, err %v; want answered ErrUnknownKey", ok, err)
		}
		if _, ok, err := c.AuthenticateCached(secret); ok || err != nil {
			t.Fatalf("before any lookup: ok %v, err %v; want not answered", ok, err)
		}
		if _, err := c.Authenticate(ctx, secret); err != nil { // cached now
			t.Fatal(err)
		}
		forged := secret[:len(secret)-secretRandLen] + strings.Repeat("A", secretRandLen)
		if _, ok, err := c.AuthenticateCached(forged); ok || err != nil {
			t.Fatalf("another secret for the cached ID: ok %v, err %v; want not answered", ok, err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		// The database is gone: what follows comes from the cache alone.
		got, ok, err := c.AuthenticateCached(secret)
		if !ok || err != nil || got.ID != k.ID || got.Workspace != "w" {
			t.Fatalf("cached key: %+v, ok %v, err %v; want key %s", got, ok, err, k.ID)
		}
		clock.Advance(time.Minute)
		if _, ok, err := c.AuthenticateCached(secret); !ok || !errors.Is(err, ErrExpiredKey) {
			t.Fatalf("cached key at expiry: ok %v, err %v; want answered ErrExpiredKey", ok, err)
		}
	})
}

// With the cache off, only a malformed secret is answered from memory.
func TestCatalog_AuthenticateCachedDisabled(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, err := be.open(Options{CacheTTL: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		secret, _, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := c.AuthenticateCached(secret); ok || err != nil {
			t.Fatalf("cache off: ok %v, err %v; want not answered", ok, err)
		}
	})
}

// A second Catalog on the same file stands for another process: what it
// changes, this one sees only when its cache entry expires.
func TestCatalog_CacheTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		clock := newFakeClock()
		gateway, err := be.open(Options{Now: clock.Now, CacheTTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer gateway.Close()
		cli, err := be.open(Options{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx := context.Background()
		secret, k, err := cli.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gateway.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if err := cli.RevokeKey(ctx, k.ID, "admin"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(4999 * time.Millisecond)
		if _, err := gateway.Authenticate(ctx, secret); err != nil {
			t.Fatalf("within the TTL the cached answer stands: err = %v", err)
		}
		clock.Advance(time.Millisecond)
		if _, err := gateway.Authenticate(ctx, secret); !errors.Is(err, ErrRevokedKey) {
			t.Fatalf("after the TTL: err = %v, want ErrRevokedKey", err)
		}
	})
}

func TestCatalog_CacheDisabled(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		clock := newFakeClock()
		gateway, err := be.open(Options{Now: clock.Now, CacheTTL: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer gateway.Close()
		cli, err := be.open(Options{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx := context.Background()
		secret, k, _ := cli.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "admin")
		if _, err := gateway.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		cli.RevokeKey(ctx, k.ID, "admin")
		if _, err := gateway.Authenticate(ctx, secret); !errors.Is(err, ErrRevokedKey) {
			t.Fatalf("uncached: err = %v, want ErrRevokedKey at once", err)
		}
	})
}

func TestKeyCache_BoundedAndGenerations(t *testing.T) {
	now := newFakeClock().Now()
	c := newKeyCache(time.Second, 10)
	var h [32]byte
	for i := range 25 {
		c.put(string(rune('a'+i)), &h, Key{}, now, c.generation())
		if len(c.entries) > 10 {
			t.Fatalf("cache holds %d entries, bound is 10", len(c.entries))
		}
	}
	gen := c.generation()
	c.invalidate("zz")
	c.put("late", &h, Key{}, now, gen)
	if _, ok := c.get("late", &h, now); ok {
		t.Fatal("a lookup begun before an invalidation was cached")
	}
}

func TestCatalog_SecretNeverStored(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, _ := be.openTest(t)
		ctx := context.Background()
		secret, k, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		rotated, err := c.RotateKey(ctx, k.ID, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.RevokeKey(ctx, k.ID, "admin"); err != nil {
			t.Fatal(err)
		}
		entries, err := c.ListAudit(ctx, AuditQuery{})
		if err != nil || len(entries) != 3 {
			t.Fatalf("audit = %d entries, %v; want create, rotate, revoke", len(entries), err)
		}
		dump, err := json.Marshal(entries)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{secret, rotated} {
			if bytes.Contains(dump, []byte(s[len(s)-secretRandLen:])) {
				t.Errorf("audit entries hold a secret: %s", dump)
			}
		}
		// Read all the database holds (on SQLite every file: main, WAL,
		// shared memory, before and after a checkpoint).
		check := func() {
			stored := be.stored(t, c)
			if len(stored) == 0 {
				t.Fatal("no database contents found")
			}
			for name, b := range stored {
				for _, s := range []string{secret, rotated} {
					if bytes.Contains(b, []byte(s[len(s)-secretRandLen:])) {
						t.Errorf("%s contains a secret", name)
					}
				}
			}
		}
		check()
		if be.path != "" {
			if _, err := c.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
				t.Fatal(err)
			}
		}
		check()
	})
}

func TestParseSecret(t *testing.T) {
	id := newKeyID()
	for range 100 {
		s := newSecret(id)
		got, ok := parseSecret(s)
		if !ok || got != id || len(s) != secretLen {
			t.Fatalf("parseSecret(%q) = %q, %v; want %q", s, got, ok, id)
		}
	}
	if len(newKeyID()) != keyIDLen {
		t.Fatal("key ID has the wrong length")
	}
}

func FuzzParseSecret(f *testing.F) {
	f.Add(newSecret(newKeyID()))
	f.Add("sk-sluice-")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := parseSecret(s)
		if !ok {
			return
		}
		if len(s) != secretLen || len(id) != keyIDLen || !strings.HasPrefix(s, secretPrefix+id+"-") {
			t.Fatalf("parseSecret(%q) accepted it with id %q", s, id)
		}
	})
}

// BenchmarkAuthenticate measures the gateway's per-request key check: a
// cache hit (a SHA-256, a map lookup, a constant-time compare) against a
// database lookup every time.
func BenchmarkAuthenticate(b *testing.B) {
	for _, bc := range []struct {
		name string
		ttl  time.Duration
	}{{"cached", time.Hour}, {"uncached", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := OpenSQLite(filepath.Join(b.TempDir(), "c.db"), Options{CacheTTL: bc.ttl, FlushInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			secret, _, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", AllowedModels: []string{"m"}}, "admin")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Authenticate(ctx, secret); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// A secret the database refused (no such key, a wrong secret, a revoked
// key) is refused again from memory for the cache's TTL: a client sending
// the same bad secret makes one query, not one a request.
func TestCatalog_RefusedSecretsAnsweredFromMemory(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		clock := newFakeClock()
		c, err := be.open(Options{Now: clock.Now, CacheTTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		secret, _, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		revoked, rk, err := c.CreateKey(ctx, Key{Workspace: "w", User: "v"}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.RevokeKey(ctx, rk.ID, "admin"); err != nil {
			t.Fatal(err)
		}
		// Well formed, for an id no key has.
		unknown := secretPrefix + strings.Repeat("b", keyIDLen) + secret[len(secretPrefix)+keyIDLen:]
		if _, ok := parseSecret(unknown); !ok {
			t.Fatalf("%q does not parse", unknown)
		}
		wrong := secret[:len(secret)-secretRandLen] + strings.Repeat("A", secretRandLen)
		cases := []struct {
			name, secret string
			want         error
		}{{"unknown", unknown, ErrUnknownKey}, {"wrong secret", wrong, ErrUnknownKey}, {"revoked", revoked, ErrRevokedKey}}
		for _, cs := range cases {
			if _, err := c.Authenticate(ctx, cs.secret); !errors.Is(err, cs.want) {
				t.Fatalf("%s: %v, want %v", cs.name, err, cs.want)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		// The database is gone: these answers come from memory alone.
		for _, cs := range cases {
			if _, ok, err := c.AuthenticateCached(cs.secret); !ok || !errors.Is(err, cs.want) {
				t.Fatalf("%s again: ok %v, err %v; want answered %v from memory", cs.name, ok, err, cs.want)
			}
		}
		clock.Advance(10 * time.Second)
		if _, ok, _ := c.AuthenticateCached(unknown); ok {
			t.Fatal("a refusal still remembered after the cache's TTL")
		}
	})
}

// A key's permission to group calls into turns, and its keeping out of
// the response cache, are kept and read back.
func TestCatalog_KeyTurns(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		c, err := be.open(Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		for _, turns := range []bool{true, false} {
			secret, _, err := c.CreateKey(ctx, Key{Workspace: "w", User: "u", Turns: turns, NoCache: !turns}, "admin")
			if err != nil {
				t.Fatal(err)
			}
			k, err := c.Authenticate(ctx, secret)
			if err != nil || k.Turns != turns || k.NoCache != !turns {
				t.Fatalf("turns %v, no_cache %v read back as %v, %v (%v)", turns, !turns, k.Turns, k.NoCache, err)
			}
		}
	})
}
