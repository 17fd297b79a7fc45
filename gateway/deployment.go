package gateway

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice"
)

// Deployment is one place a model is served from: a provider (an API key,
// a region, a project) and the model's name there. A model with several
// is sent to the one with the most room left (see deployment.room).
type Deployment struct {
	Provider string
	// UpstreamName is the model's name at the provider; empty means the
	// model's UpstreamName.
	UpstreamName string
	// Weight shares the calls among deployments whose room is alike (none
	// reported yet, or the same); 0 means 1.
	Weight int
}

// deployment is a Deployment resolved: its provider, and the circuit and
// pacer of its upstream model there (shared with any other model served
// by the same provider and upstream name).
type deployment struct {
	provider *provider
	upstream string
	weight   int
	circuit  *circuit
	pacer    *pacer
}

// deploymentsOf resolves m's deployments: its Deployments, or its Provider
// and UpstreamName when it lists none.
func (g *Gateway) deploymentsOf(m *Model) ([]*deployment, error) {
	list := m.Deployments
	if len(list) == 0 {
		list = []Deployment{{Provider: m.Provider, UpstreamName: m.UpstreamName}}
	}
	var out []*deployment
	for i, d := range list {
		p, ok := g.providers[d.Provider]
		if !ok {
			return nil, fmt.Errorf("gateway: model %q: deployment %d: unknown provider %q", m.Name, i, d.Provider)
		}
		if d.Weight < 0 {
			return nil, fmt.Errorf("gateway: model %q: deployment %d: weight must not be negative", m.Name, i)
		}
		up := d.UpstreamName
		if up == "" {
			up = m.UpstreamName
		}
		for _, o := range out {
			if o.provider == p && o.upstream == up {
				return nil, fmt.Errorf("gateway: model %q: deployment %s/%s is listed twice", m.Name, d.Provider, up)
			}
		}
		out = append(out, &deployment{provider: p, upstream: up, weight: max(d.Weight, 1),
			circuit: p.circuitFor(up), pacer: p.pacerFor(up)})
	}
	return out, nil
}

// name is how logs and metrics name the deployment.
func (d *deployment) name() string { return d.provider.Name + "/" + d.upstream }

// room is what d has left for a call of input tokens and total worst
// case at now, as its provider last reported: whether the call fits its
// request and token buckets now, and the requests left (+Inf when not
// reported). A deployment whose circuit is open has none, but when its
// probe is due: it is then tried first, so that a deployment that has
// recovered comes back while the others serve.
func (d *deployment) room(now time.Time, input, total int64) (fits bool, requests float64) {
	if d.circuit.open.Load() {
		if ok, _ := d.circuit.ready(now, d.provider.circuitCooldown); ok {
			return true, math.Inf(1)
		}
		return false, -1
	}
	p := d.pacer
	p.mu.Lock()
	defer p.mu.Unlock()
	tokens := total
	if p.tokensInput {
		tokens = input
	}
	fits = !now.Before(p.holdUntil) && p.requests.wait(now, 1) == 0 && p.tokens.wait(now, tokens) == 0
	return fits, p.requests.levelAt(now)
}

// order returns the deployments of cand that speak the call's route, in
// the order to try them: first those the call fits now, most requests
// left first; among alike, drawn by weight. A model with one deployment
// takes no lock and draws nothing.
func (c *call) order(cand *model) []*deployment {
	deps := cand.deployments
	if len(deps) == 1 {
		return deps
	}
	type ranked struct {
		d    *deployment
		fits bool
		left float64
		draw float64
	}
	now := c.g.now()
	input := c.bound.InputTokens
	total := input + c.held.capPer*max(c.bound.N, 1)
	rs := make([]ranked, 0, len(deps))
	for _, d := range deps {
		if !d.provider.serves(c.rt) || (c.ownKey != "" && d != deps[0]) {
			// A client's own provider key is for the model's first
			// deployment's provider only.
			continue
		}
		fits, left := d.room(now, input, total)
		// A weighted draw: the largest of u^(1/w) picks each in
		// proportion to its weight.
		rs = append(rs, ranked{d, fits, left, math.Pow(rand.Float64(), 1/float64(d.weight))})
	}
	better := func(a, b ranked) bool {
		if a.fits != b.fits {
			return a.fits
		}
		if a.left != b.left {
			return a.left > b.left
		}
		return a.draw > b.draw
	}
	out := make([]*deployment, 0, len(rs))
	for len(rs) > 0 {
		best := 0
		for i := range rs {
			if better(rs[i], rs[best]) {
				best = i
			}
		}
		out = append(out, rs[best].d)
		rs = append(rs[:best], rs[best+1:]...)
	}
	return out
}

// servesRoute reports whether any of m's deployments speaks rt.
func (m *model) servesRoute(rt *route) bool {
	for _, d := range m.deployments {
		if d.provider.serves(rt) {
			return true
		}
	}
	return false
}

// circuitReady reports whether some deployment of cand that speaks rt may
// be sent a call at now (without taking a probe's turn), and when the
// soonest will when none may.
func (cand *model) circuitReady(rt *route, now time.Time) (bool, time.Time) {
	var soonest time.Time
	for _, d := range cand.deployments {
		if !d.provider.serves(rt) {
			continue
		}
		ok, at := d.circuit.ready(now, d.provider.circuitCooldown)
		if ok {
			return true, time.Time{}
		}
		if soonest.IsZero() || at.Before(soonest) {
			soonest = at
		}
	}
	return false, soonest
}

// providerLimits are the limits the providers of cand's deployments last
// reported, added up, for the rules that take their limit from the
// provider: the model's capacity is the sum of its deployments'. It is
// held only while every deployment is.
func (cand *model) providerLimits() sluice.ProviderLimits {
	if len(cand.deployments) == 1 {
		return cand.deployments[0].pacer.limits()
	}
	var sum sluice.ProviderLimits
	for i, d := range cand.deployments {
		l := d.pacer.limits()
		sum.Requests += l.Requests
		sum.Tokens += l.Tokens
		sum.InputTokens += l.InputTokens
		if i == 0 || l.HeldUntil.Before(sum.HeldUntil) {
			sum.HeldUntil = l.HeldUntil
		}
	}
	return sum
}

// liveDeployment is the deployment m's live connections go to: its first
// that speaks the Realtime API (any but Anthropic's); nil for none. A live
// connection is one long call, not chosen by room like the calls of HTTP.
func (m *model) liveDeployment() *deployment {
	for _, d := range m.deployments {
		if d.provider.Kind != KindAnthropic {
			return d
		}
	}
	return nil
}
