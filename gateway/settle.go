package gateway

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
)

// ending says what becomes of a call's reservation at its end.
type ending uint8

const (
	// endNothing: the call holds no reservation (refused before any
	// admission, or the admissions it made were given back).
	endNothing ending = iota
	// endRelease: the model did no work (the provider refused the call):
	// the reservation is given back.
	endRelease
	// endCharge: the model may have worked: the reservation is settled
	// with the usage reported, or charged as it stands when none (or none
	// possible) was.
	endCharge
)

// afterAnswer ends the call: at once, or, when its reservation is to be
// settled, once its answer is written out, so that the client does not
// wait for the store (a durable store commits the settlement); Drain still
// waits for it. Every call comes here once: serve's, or a stream's when its
// body closes.
func (c *call) afterAnswer() {
	if c.ending != endCharge {
		c.end()
		return
	}
	if conn := c.ctx.Conn(); c.served && conn != nil {
		// On the connection's goroutine, from the ConnState hook.
		c.g.after.add(conn, c.end)
		return
	}
	go c.end()
}

// end is where every call ends, whatever its answer: whole, streamed,
// refused, failed, or abandoned by its client. It settles or releases the
// reservation the call ends with, and its session's charge; records the
// call in the ledger, tells the Observer and the trace, and leaves the
// in-flight count. With a journaling store the settlement's end comes
// later, on the store's goroutine: nothing from there on may touch c.ctx,
// which serves the connection's next request by then.
func (c *call) end() {
	switch c.ending {
	case endCharge:
		c.settle()
		return // settled ends the call
	case endRelease:
		c.release(c.adm)
	}
	c.observe()
	c.g.inFlight.done()
}

// release gives back adm's reservation and the session's charge of a call
// the model did no work for. A release the store failed is retried as a
// settlement is (retryEnd), so the place comes back as soon as the store
// does and no budget keeps what was reserved.
func (c *call) release(adm *admission) {
	if err := adm.res.Release(context.Background()); err != nil {
		c.g.log.Error("release failed; retrying until the reservation's deadline", "request_id", c.event.RequestID, "route", c.rt.name, "model", adm.model.Name, "err", err)
		go c.g.retryEnd(context.Background(), pendingEnd{res: adm.res, release: true, requestID: c.event.RequestID, model: adm.model.Name})
	}
	c.settleSession(sluice.Usage{}, true)
}

// settle settles the call's reservation with the usage reported (or the
// reservation's bound when none was), then its session, and has settled
// end the call once the store answers.
func (c *call) settle() {
	adm := c.adm
	// The answer is out (a stream has ended): the request's duration stops
	// here, before the settlement's commit.
	c.event.Duration = c.g.since(c.start)
	su := c.reportedUsage(adm, c.usage, c.reported) // zero: the reservation is charged
	charged := su
	estimated := charged.IsZero()
	if !estimated && !c.cut && !c.bound.NoOutput {
		adm.model.noteOutput(su.OutputTokens / max(c.bound.N, 1))
	}
	reserved := c.request(adm.model, adm.capPer).Max
	if estimated {
		// What the reservation charged: the output cap sent, clamped or not.
		charged = reserved
	}
	if c.cache.hit != nil {
		// Answered from the response cache (cache.go): no model worked,
		// and each rule charged what its cache_hits says.
		charged, estimated, reserved = sluice.Usage{}, false, sluice.Usage{}
	}
	// The session's counters are in the catalog, not the limit store.
	c.settleSession(charged, false)
	c.trace.startSettle()
	c.record = UsageRecord{At: c.g.now(), Org: c.who.Org, Workspace: c.who.Workspace, Route: c.rt.name, Model: adm.model.Name, Provider: c.event.Provider,
		InputTokens: charged.InputTokens, OutputTokens: charged.OutputTokens, CachedInputTokens: charged.CachedInputTokens, Cost: charged.Cost, Tags: c.tags,
		KeyID: c.who.KeyID, User: c.who.User, Team: c.who.Team, RequestID: c.event.RequestID, Estimated: estimated, Reserved: reserved,
		CacheHit: c.cache.hit != nil, CacheSaved: c.event.CacheSaved, SessionID: c.session.id, ConnectionID: c.connection,
		AudioInputTokens: charged.AudioInputTokens, AudioOutputTokens: charged.AudioOutputTokens}
	c.event.Usage = charged
	ctx, taken := c.g.attach(c.record)
	adm.res.SettleAsync(ctx, su, func(err error) { c.settled(ctx, su, taken, err) })
}

// settled ends the call once the store answered its settlement with su,
// made with ctx (which carried c.record when taken is not nil): it records
// the call, or leaves it to the retries, and tells the Observer.
func (c *call) settled(ctx context.Context, su sluice.Usage, taken func() bool, err error) {
	c.trace.endSettle(err)
	if err != nil {
		c.g.log.Error("settle failed; retrying until the reservation's deadline", "request_id", c.record.RequestID, "route", c.record.Route, "model", c.record.Model, "err", err)
		go c.g.retryEnd(ctx, pendingEnd{res: c.adm.res, usage: su, record: c.record, taken: taken, requestID: c.record.RequestID, model: c.record.Model})
	}
	if err == nil || taken == nil {
		// With the record attached, a failed settlement leaves it to
		// the retries.
		c.g.record(c.record, taken)
	}
	c.observe()
	c.g.inFlight.done()
}

// observe ends the call's trace and tells the Observer.
func (c *call) observe() {
	if c.event.Duration == 0 { // unless settle stopped it when the answer was out
		c.event.Duration = c.g.since(c.start)
	}
	c.trace.end(&c.event)
	if c.g.opts.Observer != nil {
		c.g.opts.Observer(c.event)
	}
}

// reportedUsage is what the call is settled with: the usage the provider
// reported, priced, or zero (the reservation is charged) when it reported
// none, or none it could have produced.
func (c *call) reportedUsage(adm *admission, u llm.Usage, reported bool) sluice.Usage {
	if !reported {
		return sluice.Usage{}
	}
	if c.impossible(adm, u) {
		// A provider that reports more than the call could produce is
		// misbehaving (or hostile): the value is never stored, and the
		// reservation is charged as for a call that reported nothing.
		c.g.log.Error("provider reported impossible usage; the reservation is charged instead", "request_id", c.event.RequestID, "route", c.rt.name, "model", adm.model.Name,
			"input_tokens", u.InputTokens, "output_tokens", u.OutputTokens, "cached_input_tokens", u.CachedInputTokens,
			"cache_write_tokens", u.CacheWriteTokens, "bound", c.usageBound(adm))
		c.event.ImpossibleUsage = true
		return sluice.Usage{}
	}
	return c.settleUsage(adm.model, u)
}

// usageBound is the most tokens the call could produce: the model's context
// window (or, unknown, the library's ceiling on one usage value) plus the
// output cap sent times n.
func (c *call) usageBound(adm *admission) int64 {
	window := adm.model.ContextWindow
	if window <= 0 {
		window = sluice.MaxTokens
	}
	n := max(c.bound.N, 1)
	return min(window+adm.capPer*n, sluice.MaxTokens)
}

// impossible reports usage the call could not have produced: a negative
// count, parts larger than the whole, or more tokens than its bound.
func (c *call) impossible(adm *admission, u llm.Usage) bool {
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0 ||
		u.CachedInputTokens > u.InputTokens-u.CacheWriteTokens {
		return true
	}
	bound := c.usageBound(adm)
	return u.InputTokens > bound || u.OutputTokens > bound || u.InputTokens+u.OutputTokens > bound
}

// settleUsage turns reported usage into what the limiter charges.
func (c *call) settleUsage(cand *model, u llm.Usage) sluice.Usage {
	su := sluice.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteTokens, Custom: c.custom,
		AudioInputTokens: u.AudioInputTokens, AudioOutputTokens: u.AudioOutputTokens}
	if c.ownKey == "" {
		su.Cost = cand.Price.Cost(su)
	}
	return su
}

// attach returns the context to settle a call with: carrying u to the
// store when the UsageRecorder is a SettlementRecorder. taken is nil when
// u is not attached.
func (g *Gateway) attach(u UsageRecord) (_ context.Context, taken func() bool) {
	if sr, ok := g.opts.Usage.(SettlementRecorder); ok {
		return sr.Attach(context.Background(), u)
	}
	return context.Background(), nil
}

// record gives u to the UsageRecorder once its settlement succeeded,
// unless the store took it with the settlement.
func (g *Gateway) record(u UsageRecord, taken func() bool) {
	if g.opts.Usage != nil && (taken == nil || !taken()) {
		g.opts.Usage.RecordUsage(u)
	}
}

// pendingEnd is a settlement (or a release) the store failed, for
// retryEnd: res settled with usage, or released; record, when taken is not
// nil, went with the settlement and is recorded once one succeeds, unless
// the store took it.
type pendingEnd struct {
	res              *sluice.Reservation
	release          bool
	usage            sluice.Usage
	record           UsageRecord
	taken            func() bool
	requestID, model string
}

// retryEnd applies p again with a context made from base, backing off
// (SettleRetryBase, doubling to 5 s), until the store answers or the
// reservation's deadline passes (then the sweep charges it). Settling is
// idempotent: a settlement the store applied before failing to answer, or
// one the sweep made, is not applied twice, nor is its record. Leases are
// freed as soon as the store is back.
func (g *Gateway) retryEnd(base context.Context, p pendingEnd) {
	delay := g.opts.SettleRetryBase
	for attempt := 1; ; attempt++ {
		if g.now().Add(delay).After(p.res.Deadline()) {
			g.log.Error("settle abandoned at the reservation's deadline; the sweep charges it", "request_id", p.requestID, "model", p.model, "attempts", attempt)
			return
		}
		g.sleep(delay, nil)
		delay = min(2*delay, 5*time.Second)
		ctx, cancel := context.WithTimeout(base, 5*time.Second)
		var err error
		if p.release {
			err = p.res.Release(ctx)
		} else {
			err = p.res.Settle(ctx, p.usage)
		}
		cancel()
		if err == nil {
			g.log.Info("settled after retrying", "request_id", p.requestID, "model", p.model, "attempts", attempt+1)
			if p.taken != nil {
				g.record(p.record, p.taken)
			}
			return
		}
	}
}
