package gateway

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/valyala/fasthttp"
)

// principals authenticates each secret as its principal.
type principals map[string]Principal

func (p principals) Authenticate(_ context.Context, secret string) (Principal, error) {
	who, ok := p[secret]
	if !ok {
		return Principal{}, ErrBadKey
	}
	return who, nil
}

// TestGateway_ClassReachesTheLimiter checks that the identity a call asks
// the limiter to admit carries the key's class, else its tier's
// (Options.TierClass), else none. (That the class decides an admission is
// the test of the rules with classes.)
func TestGateway_ClassReachesTheLimiter(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Limiter: l, TierClass: map[string]string{"free": "batch", "pro": "interactive"}, Keys: principals{
		"own":     {KeyID: "k1", Org: "o", Workspace: "w", User: "u", Tier: "free", Class: "interactive"},
		"tiered":  {KeyID: "k2", Org: "o", Workspace: "w", User: "u", Tier: "free"},
		"classy":  {KeyID: "k3", Org: "o", Workspace: "w", User: "u", Class: "batch"},
		"untiers": {KeyID: "k4", Org: "o", Workspace: "w", User: "u", Tier: "unknown"},
		"plain":   {KeyID: "k5", Org: "o", Workspace: "w", User: "u"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for secret, want := range map[string]string{"own": "interactive", "tiered": "batch", "classy": "batch", "untiers": "", "plain": ""} {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.Set("Authorization", "Bearer "+secret)
		who, _, err := g.authenticate(&ctx, "127.0.0.1", &Event{})
		if err != nil {
			t.Fatalf("%s: %v", secret, err)
		}
		c := &call{g: g, who: who, rt: routes["/v1/chat/completions"]}
		if got := c.request(&model{Model: Model{Name: "m"}}, 16).Identity.Class; got != want {
			t.Errorf("key %s: the limiter is asked for class %q, want %q", secret, got, want)
		}
	}
}
