package gateway

import (
	"strconv"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/openai"
)

// A response the provider starts by itself (its voice activity detection)
// is admitted when its response.created arrives; refused, it is cancelled.
// The provider may have worked before the cancel landed (read the
// conversation, produced output): that is charged as an abandoned stream's
// output is, to the counters and the ledger. No admission of its own holds
// it, so it goes with the connection's settlement at close: the
// connection's reservation holds every rule a response of it is charged
// by (the same subject, route and model), and a settlement charges what
// was used whatever was reserved. So the connection's record carries those
// tokens and their cost.

// cancel cancels r, a response the provider started that the rules
// refused, and follows it until its response.done.
func (lc *liveConn) cancel(r *liveResponse) {
	lc.mu.Lock()
	if lc.cancelled == nil {
		lc.cancelled = map[string]*liveResponse{}
	}
	lc.cancelled[r.id] = r
	lc.mu.Unlock()
	lc.forward([]byte(`{"type":"response.cancel","response_id":` + strconv.Quote(r.id) + `}`))
}

// cancelledDone ends a cancelled response with its response.done: what it
// reports (or, with none, its input estimate and the output seen) is
// added to what the connection is charged at close. lc.mu is held.
func (lc *liveConn) cancelledDone(ev *openai.RealtimeServerEvent) {
	r := lc.cancelled[ev.Response.ID]
	if r == nil {
		return
	}
	delete(lc.cancelled, ev.Response.ID)
	u := lc.usageOfDone(r, ev)
	if u.Malformed() {
		u = llm.Usage{InputTokens: r.input, OutputTokens: r.output}
	}
	addUsage(&lc.unsolicited, u)
	lc.g.log.Info("a refused response the provider started by itself used tokens before its cancel; charged with the connection",
		"request_id", lc.c.event.RequestID, "response_id", ev.Response.ID, "input_tokens", u.InputTokens, "output_tokens", u.OutputTokens)
}

// unsolicitedUsage is what the cancelled responses used, at the
// connection's close: those that ended as they reported, those still
// open their input estimate and the output seen so far. It is charged to
// the connection's session too (its token and cost counters: no turn).
func (lc *liveConn) unsolicitedUsage() llm.Usage {
	lc.mu.Lock()
	u := lc.unsolicited
	for id, r := range lc.cancelled {
		addUsage(&u, llm.Usage{InputTokens: r.input, OutputTokens: r.output})
		delete(lc.cancelled, id)
	}
	lc.mu.Unlock()
	c := lc.c
	if c.session.id != "" && u.TotalTokens() > 0 {
		su := c.settleUsage(lc.model, u)
		cctx, cancel := c.g.catalogContext()
		defer cancel()
		if err := c.g.opts.Sessions.Store.SettleSession(cctx, c.session.id, 0, su.InputTokens+su.OutputTokens, su.Cost); err != nil {
			c.g.log.Error("session settle failed", "session", c.session.id, "err", err)
		}
	}
	return u
}

// addUsage adds u to sum.
func addUsage(sum *llm.Usage, u llm.Usage) {
	sum.InputTokens += u.InputTokens
	sum.OutputTokens += u.OutputTokens
	sum.CachedInputTokens += u.CachedInputTokens
	sum.CacheWriteTokens += u.CacheWriteTokens
	sum.AudioInputTokens += u.AudioInputTokens
	sum.AudioOutputTokens += u.AudioOutputTokens
}
