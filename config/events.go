package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Events says where Sluice's events go besides the log and the audit log.
type Events struct {
	// Webhooks are receivers of events, each sent the types it names, as
	// signed JSON bodies, retried with backoff off the request's path.
	Webhooks []Webhook `yaml:"webhooks,omitempty"`
}

// Webhook is one receiver of events.
type Webhook struct {
	// URL is where the events are posted (http or https).
	URL string `yaml:"url"`
	// Events names the event types it is sent (EventTypes).
	Events []string `yaml:"events"`
	// SecretEnv names the environment variable holding the secret the
	// bodies are signed with (Standard Webhooks: a whsec_ secret, or any
	// string used as it is).
	SecretEnv string `yaml:"secret_env"`
}

// EventTypes are the events a webhook may ask for.
var EventTypes = []string{"budget.warning", "budget.overrun", "rule.shadow_refusal", "dependency.down", "dependency.up"}

// Secret reads the webhook's secret from env; "" when unset.
func (w *Webhook) Secret(env func(string) (string, bool)) string {
	if w.SecretEnv == "" || env == nil {
		return ""
	}
	v, _ := env(w.SecretEnv)
	return v
}

func (v *checker) events() {
	for i, w := range v.c.Events.Webhooks {
		path := fmt.Sprintf("events.webhooks[%d]", i)
		u, err := url.Parse(w.URL)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			v.add(path+".url", "must be an http:// or https:// URL with a host, got %q", w.URL)
		}
		if len(w.Events) == 0 {
			v.add(path+".events", "is empty: name the events to send (%s)", strings.Join(EventTypes, ", "))
		}
		for j, e := range w.Events {
			if !slices.Contains(EventTypes, e) {
				v.add(fmt.Sprintf("%s.events[%d]", path, j), "unknown event %q (one of %s)", e, strings.Join(EventTypes, ", "))
			}
		}
		if w.SecretEnv == "" {
			v.add(path+".secret_env", "is empty: name the environment variable that holds the signing secret")
		}
	}
}
