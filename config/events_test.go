package config

import (
	"reflect"
	"testing"
)

// A webhook's URL, events and secret variable are read; its secret comes
// from the environment.
func TestParse_Webhooks(t *testing.T) {
	c, err := Parse([]byte(`
events:
  webhooks:
    - url: https://hooks.example.com/sluice
      events: [budget.warning, budget.overrun, dependency.down]
      secret_env: SLUICE_HOOK_SECRET
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Webhook{{URL: "https://hooks.example.com/sluice", Events: []string{"budget.warning", "budget.overrun", "dependency.down"}, SecretEnv: "SLUICE_HOOK_SECRET"}}
	if !reflect.DeepEqual(c.Events.Webhooks, want) {
		t.Fatalf("webhooks %+v, want %+v", c.Events.Webhooks, want)
	}
	env := func(k string) (string, bool) {
		if k == "SLUICE_HOOK_SECRET" {
			return "s3cret", true
		}
		return "", false
	}
	if got := c.Events.Webhooks[0].Secret(env); got != "s3cret" {
		t.Errorf("secret %q", got)
	}
}
