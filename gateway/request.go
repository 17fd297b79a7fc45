package gateway

import (
	"math"

	"github.com/sluicehq/sluice"
)

// What a call asks of the limiter: who it is charged to, and its worst
// case on a candidate model. Every stage reads these; they call no stage.

// identity is who the call is charged to, on cand (nil: no model yet).
func (c *call) identity(cand *model) sluice.Identity {
	id := principalIdentity(&c.who, "")
	id.IP, id.Session, id.Route, id.Tags = c.ip, c.session.id, c.rt.name, c.tags
	if cand != nil {
		id.Model = cand.Name
	}
	return id
}

// principalIdentity is who calling model, without a call's own attributes
// (tags, session, route): the identity whose budgets gate a session's mint,
// and whose rules' room the gateway's answers report when no call of the
// key was admitted (the session routes, a refused identity header).
func principalIdentity(who *Principal, model string) sluice.Identity {
	return sluice.Identity{Org: who.Org, Workspace: who.Workspace, Team: who.Team, User: who.User, Key: who.KeyID, Model: model, Tier: who.Tier, Class: who.Class}
}

// request is what the call asks of the limiter on cand with an output cap
// of capPer per completion: its worst case.
func (c *call) request(cand *model, capPer int64) sluice.Request {
	max := sluice.Usage{InputTokens: c.bound.InputTokens, OutputTokens: capPer * c.bound.N}
	price := cand.Price
	if c.ownKey != "" {
		price = sluice.Price{}
	}
	max.Cost = price.Cost(max)
	var expected sluice.Usage
	if mean := cand.expectedOutput(); mean > 0 && !c.bound.NoOutput {
		// What a rule with reserve: estimate reserves; the worst case
		// until the model has settled a call.
		expected = sluice.Usage{InputTokens: max.InputTokens, OutputTokens: min(mean, capPer) * c.bound.N}
		expected.Cost = price.Cost(expected)
	}
	return sluice.Request{
		Identity:    c.identity(cand),
		Max:         max,
		Expected:    expected,
		OutputPrice: price.Output,
		Timeout:     c.g.opts.RequestTimeout,
		MaxWait:     c.maxWait,
		Turn:        c.turn,
	}
}

// outputCap is the output cap per completion for cand: the client's,
// capped at the model's maximum, or the maximum when the client set none.
func (c *call) outputCap(cand *model) int64 {
	if c.bound.NoOutput {
		return 0
	}
	if c.bound.HasMaxOutput && c.bound.MaxOutputTokens <= cand.MaxOutputTokens {
		return c.bound.MaxOutputTokens
	}
	return cand.MaxOutputTokens
}

// expectedOutput is the output per completion m's calls are expected to
// produce: the mean of its settled calls' on this replica, rounded up; 0
// before the first.
func (m *model) expectedOutput() int64 {
	return int64(math.Ceil(math.Float64frombits(m.outputMean.Load())))
}

// noteOutput adds a settled call's output per completion to m's mean (a
// moving mean over about the last 16 calls). Concurrent notes may lose
// one another's update: the mean is an estimate.
func (m *model) noteOutput(perCompletion int64) {
	old := math.Float64frombits(m.outputMean.Load())
	mean := float64(perCompletion)
	if old > 0 {
		mean = old + (mean-old)/16
	}
	m.outputMean.Store(math.Float64bits(max(mean, math.SmallestNonzeroFloat64)))
}
