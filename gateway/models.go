package gateway

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/valyala/fasthttp"
)

// tenantModel is a TenantModel with its models resolved.
type tenantModel struct {
	name string
	// def serves the identities no route matches; nil for none.
	def    *model
	routes []tenantRoute
}

type tenantRoute struct {
	TenantRoute
	model *model
	// rank orders the routes that match one identity: the highest serves.
	rank int
}

// Route ranks: a workspace within its org is more specific than the org,
// which is more specific than a tier; the tier breaks ties.
const (
	rankTier      = 1
	rankOrg       = 2
	rankWorkspace = 4
)

func (g *Gateway) addTenantModels(list []TenantModel) error {
	g.tenants = map[string]*tenantModel{}
	for _, t := range list {
		if _, dup := g.models[t.Name]; dup {
			return fmt.Errorf("gateway: tenant model %q is also the name or an alias of a model", t.Name)
		}
		if _, dup := g.tenants[t.Name]; dup || t.Name == "" {
			return fmt.Errorf("gateway: tenant model name %q is empty or used twice", t.Name)
		}
		tm := &tenantModel{name: t.Name}
		if t.Default != "" {
			m, ok := g.models[t.Default]
			if !ok {
				return fmt.Errorf("gateway: tenant model %q: unknown default model %q", t.Name, t.Default)
			}
			tm.def = m
		}
		for _, r := range t.Routes {
			m, ok := g.models[r.Model]
			if !ok {
				return fmt.Errorf("gateway: tenant model %q: unknown model %q", t.Name, r.Model)
			}
			if r.Workspace != "" && r.Org == "" {
				return fmt.Errorf("gateway: tenant model %q: the route to %q names workspace %q without its org", t.Name, r.Model, r.Workspace)
			}
			tr := tenantRoute{TenantRoute: r, model: m}
			if r.Workspace != "" {
				tr.rank += rankWorkspace
			}
			if r.Org != "" {
				tr.rank += rankOrg
			}
			if r.Tier != "" {
				tr.rank += rankTier
			}
			if tr.rank == 0 {
				return fmt.Errorf("gateway: tenant model %q: the route to %q names no org, workspace or tier", t.Name, r.Model)
			}
			tm.routes = append(tm.routes, tr)
		}
		g.tenants[t.Name] = tm
		g.tenantList = append(g.tenantList, tm)
	}
	return nil
}

// serve returns the model that serves t to who: the most specific route
// that matches (the first of equals), else the default; nil when neither.
func (t *tenantModel) serve(who *Principal) *model {
	best, rank := t.def, 0
	for i := range t.routes {
		r := &t.routes[i]
		if r.rank > rank && (r.Org == "" || r.Org == who.Org) && (r.Workspace == "" || r.Workspace == who.Workspace) &&
			(r.Tier == "" || r.Tier == who.Tier) {
			best, rank = r.model, r.rank
		}
	}
	return best
}

// lookup returns the model that serves the name a client asked for, by
// model name, alias or tenant model name (then for who), and whether the
// name was a tenant model's. It returns nil for a name that does not exist,
// and for a tenant model that serves no model to who.
func (g *Gateway) lookup(name string, who *Principal) (m *model, tenant bool) {
	if m, ok := g.models[name]; ok {
		return m, false
	}
	if t, ok := g.tenants[name]; ok {
		return t.serve(who), true
	}
	return nil, false
}

// mayCall reports whether who may call m by its name or an alias: a key
// with allowed models may call only the models they name (by name or
// alias) and the tenant models they name (see mayAsk).
func mayCall(who *Principal, m *model) bool {
	if len(who.AllowedModels) == 0 {
		return true
	}
	return slices.Contains(who.AllowedModels, m.Name) ||
		slices.ContainsFunc(m.Aliases, func(a string) bool { return slices.Contains(who.AllowedModels, a) })
}

// mayAsk reports whether who may ask for the tenant model named name: its
// allowed models name the logical name, not the models it serves.
func mayAsk(who *Principal, name string) bool {
	return len(who.AllowedModels) == 0 || slices.Contains(who.AllowedModels, name)
}

// modelList is the body of GET /v1/models, in OpenAI's shape.
type modelList struct {
	Object string       `json:"object"`
	Data   []modelEntry `json:"data"`
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels is GET /v1/models: the models the key may call, under the
// names it may ask for them by. Models are listed by name (their aliases
// are accepted, not listed); a tenant model is listed by its name when it
// serves the key's identity, owned by the provider of the model it serves.
func (g *Gateway) listModels(ctx *fasthttp.RequestCtx) {
	rt := routes["/v1/chat/completions"]
	if len(ctx.Request.Header.Peek("anthropic-version")) > 0 {
		rt = routes["/v1/messages"]
	}
	// A service key's asserted workspace picks the tenant models' routes,
	// as it does for a call.
	who, _, err := g.authenticate(ctx, clientIP(ctx, g.opts.TrustedProxies), &Event{})
	if err != nil {
		g.writeError(ctx, rt, err)
		g.observeEarly(ctx, "models", err)
		return
	}
	list := modelList{Object: "list", Data: []modelEntry{}}
	for _, m := range g.modelList {
		if mayCall(&who, m) {
			list.Data = append(list.Data, modelEntry{ID: m.Name, Object: "model", OwnedBy: m.Provider})
		}
	}
	for _, t := range g.tenantList {
		if m := t.serve(&who); m != nil && mayAsk(&who, t.name) {
			list.Data = append(list.Data, modelEntry{ID: t.name, Object: "model", OwnedBy: m.Provider})
		}
	}
	ev := Event{Route: "models", Org: who.Org, Workspace: who.Workspace, KeyID: who.KeyID, Outcome: outcomeAdmitted}
	body, err := json.Marshal(list)
	if err != nil {
		g.writeError(ctx, rt, err)
		ev.Outcome, ev.Class = outcomeOf(err)
		ev.Cause = causeOf(err)
	} else {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}
	g.observe(ctx, ev)
}
