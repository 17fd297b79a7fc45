package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// TenantModel is a logical model name that serves a different model per
// tenant: the cheap model of one org may be mock-small, of another
// mock-large. Clients ask for Name; the gateway serves the model of the
// most specific route that matches the key's identity, or Default when none
// does. Rules on models count the served model, never the logical name.
//
//	tenant_models:
//	  - name: cheap
//	    default: mock-small
//	    routes:
//	      - {org: acme, model: mock-large}
//	      - {org: acme, workspace: research, model: mock-small}
//	      - {tier: free, model: mock-small}
type TenantModel struct {
	// Name is what clients ask for; it is no model's name or alias.
	Name string `yaml:"name"`
	// Default is the model served to an identity that no route matches;
	// empty means the name does not exist for that identity (404).
	Default string `yaml:"default,omitempty"`
	// Routes map identities to served models. A route matches when every
	// attribute it names equals the identity's; the most specific match
	// wins: a route naming a workspace (within its org) beats one naming
	// only the org, which beats one naming only a tier, and naming a tier
	// as well breaks the tie (org+workspace+tier, org+workspace,
	// org+tier, org, tier). Two routes with the same attributes are
	// refused, so the order of the list does not matter.
	Routes []TenantRoute `yaml:"routes"`
}

// TenantRoute maps the identities with an org, a workspace within it, a
// tier, or a combination of them, to the model they are served.
type TenantRoute struct {
	Org string `yaml:"org,omitempty"`
	// Workspace needs Org: workspace names are unique only within an org.
	Workspace string `yaml:"workspace,omitempty"`
	Tier      string `yaml:"tier,omitempty"`
	// Model is a configured model's name or alias.
	Model string `yaml:"model"`
}

// TenantModel returns the tenant model named name.
func (c *Config) TenantModel(name string) (*TenantModel, bool) {
	for i := range c.TenantModels {
		if c.TenantModels[i].Name == name {
			return &c.TenantModels[i], true
		}
	}
	return nil, false
}

// ErrUnknownTier and ErrUnknownModel are what CheckKey's errors wrap.
var (
	ErrUnknownTier  = errors.New("unknown tier")
	ErrUnknownModel = errors.New("unknown model")
)

// CheckKey reports, as an error wrapping ErrUnknownTier or ErrUnknownModel,
// why a key with this tier and these allowed models would not work as
// meant under c: a tier that is not configured would get the untiered
// limits, and a model that is not a configured model, alias or tenant model
// name could never be called. An empty tier and no models are fine.
func (c *Config) CheckKey(tier string, models []string) error {
	if tier != "" && !slices.ContainsFunc(c.Tiers, func(t Tier) bool { return t.Name == tier }) {
		if len(c.Tiers) == 0 {
			return fmt.Errorf("%w %q: the configuration has no tiers", ErrUnknownTier, tier)
		}
		names := make([]string, len(c.Tiers))
		for i, t := range c.Tiers {
			names[i] = t.Name
		}
		return fmt.Errorf("%w %q (configured: %s)", ErrUnknownTier, tier, strings.Join(names, ", "))
	}
	for _, m := range models {
		if _, ok := c.Model(m); ok {
			continue
		}
		if _, ok := c.TenantModel(m); ok {
			continue
		}
		return fmt.Errorf("%w %q (known: %s)", ErrUnknownModel, m, strings.Join(c.modelNames(), ", "))
	}
	return nil
}

// modelNames lists every name a client may ask for: models, their aliases,
// tenant models.
func (c *Config) modelNames() []string {
	var names []string
	for _, m := range c.Models {
		names = append(names, m.Name)
		names = append(names, m.Aliases...)
	}
	for _, t := range c.TenantModels {
		names = append(names, t.Name)
	}
	return names
}

func (v *checker) tenantModels() {
	c := v.c
	names := map[string]int{}
	for i := range c.TenantModels {
		t := &c.TenantModels[i]
		at := fmt.Sprintf("tenant_models[%d]", i)
		if m, ok := c.Model(t.Name); ok && t.Name != "" {
			k := slices.IndexFunc(c.Models, func(x Model) bool { return x.Name == m.Name })
			if m.Name == t.Name {
				v.add(at+".name", "%q is the name of models[%d]: a tenant model needs a name of its own", t.Name, k)
			} else {
				v.add(at+".name", "%q is an alias of models[%d] (%q)", t.Name, k, m.Name)
			}
		} else {
			v.name(at, t.Name, names, i, "tenant_models")
		}
		if _, ok := c.Model(t.Default); !ok && t.Default != "" {
			v.add(at+".default", "unknown model %q", t.Default)
		}
		if len(t.Routes) == 0 {
			v.add(at+".routes", "none: a name that serves one model to everyone is an alias")
		}
		for j, r := range t.Routes {
			path := fmt.Sprintf("%s.routes[%d]", at, j)
			switch {
			case r.Org == "" && r.Workspace == "" && r.Tier == "":
				v.add(path, "names no org, workspace or tier (the default serves everyone else)")
			case r.Workspace != "" && r.Org == "":
				v.add(path+".workspace", "needs its org: a workspace name is unique only within its org")
			}
			if r.Tier != "" && !slices.ContainsFunc(c.Tiers, func(x Tier) bool { return x.Name == r.Tier }) {
				v.add(path+".tier", "unknown tier %q", r.Tier)
			}
			switch _, ok := c.Model(r.Model); {
			case r.Model == "":
				v.add(path+".model", "is empty")
			case !ok:
				v.add(path+".model", "unknown model %q", r.Model)
			}
			for k := range j {
				if o := t.Routes[k]; o.Org == r.Org && o.Workspace == r.Workspace && o.Tier == r.Tier {
					v.add(path, "matches the same org, workspace and tier as routes[%d]", k)
					break
				}
			}
		}
	}
}
