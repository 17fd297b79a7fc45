package gateway

import (
	"context"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/openai"
)

// liveResponse is one response of a live connection: a call admitted
// before its response.create was forwarded, ended by its response.done.
type liveResponse struct {
	lc *liveConn
	c  *call
	// id is the provider's, from response.created; eventID the client's
	// event_id of its response.create.
	id, eventID string
	// outOfBand is set for a response outside the conversation
	// (conversation: "none"), whose input is not the conversation's.
	outOfBand bool
	// input is the estimate of its input; appendedAt what had been
	// appended to the conversation when it was asked for; output the
	// tokens its deltas showed so far.
	input, appendedAt, output int64
}

// createResponse admits a response.create and forwards it, or answers it
// with an error event (and, for a limit that ends the session, closes).
// Its worst case is the conversation as the provider last reported it,
// plus what was appended since, plus the response's own input and output
// cap (the response's max_output_tokens, else the session's, else, or for
// "inf", the model's maximum).
func (lc *liveConn) createResponse(ev *openai.RealtimeClientEvent, frame []byte) {
	var asked int64
	var set bool
	if ev.Response != nil {
		var err error
		if asked, set, err = openai.RealtimeCap(ev.Response.MaxOutputTokens); err != nil {
			lc.sendError(badEventError(err, ev.EventID))
			return
		}
	}
	lc.mu.Lock()
	input := lc.lastInput + lc.appended + ev.ResponseExtra()
	capPer := lc.sessionCap
	if set {
		capPer = asked
	}
	r := lc.newResponse(input, capPer)
	r.eventID, r.appendedAt = ev.EventID, lc.appended
	r.outOfBand = ev.Response != nil && ev.Response.Conversation == "none"
	lc.mu.Unlock()
	if err := r.admit(); err != nil {
		lc.refuseResponse(r, err, ev.EventID)
		return
	}
	lc.mu.Lock()
	lc.pending = append(lc.pending, r)
	lc.mu.Unlock()
	if !lc.forward(frame) {
		// Never sent: given back.
		lc.remove(r)
		r.c.ending = endRelease
		r.c.end()
	}
}

// newResponse makes the call of a response on the connection, with input
// tokens in and an output cap of capPer (0: the model's maximum). lc.mu
// is held.
func (lc *liveConn) newResponse(input, capPer int64) *liveResponse {
	base, m := lc.c, lc.model
	if capPer <= 0 || capPer > m.MaxOutputTokens {
		capPer = m.MaxOutputTokens
	}
	lc.responses++
	g := lc.g
	c := &call{g: g, rt: realtimeRoute, who: base.who, asserted: base.asserted, ip: base.ip, model: base.model, ownKey: base.ownKey,
		tags: base.tags, start: g.now(), deadline: base.deadline, authenticated: true, tried: m, connection: base.connection}
	c.session.id, c.session.endsCall = base.session.id, base.session.endsCall
	c.bound = llm.Bound{Model: base.bound.Model, N: 1, InputTokens: input, HasMaxOutput: true, MaxOutputTokens: capPer, MinOutputTokens: 1}
	c.event = Event{Route: realtimeRoute.name, RequestID: base.event.RequestID + "/" + strconv.Itoa(lc.responses), Model: m.Name, Provider: m.liveDeployment().provider.Name,
		Org: base.who.Org, Workspace: base.who.Workspace, KeyID: base.who.KeyID, SessionID: base.session.id, Tags: base.tags}
	return &liveResponse{lc: lc, c: c, input: input}
}

// admit admits the response's call by the rules (it takes no second place
// on concurrency rules: the connection holds one) and charges its session.
func (r *liveResponse) admit() error {
	c, m := r.c, r.lc.model
	c.g.inFlight.add() // until c ends
	req := c.request(m, c.bound.MaxOutputTokens)
	req.InFlight = true
	req.Max.Cost = worstCost(c, m, req.Max)
	req.Timeout = max(c.deadline.Sub(c.g.now()), c.g.opts.RequestTimeout)
	t0 := c.g.now()
	res, err := c.g.limiter.Admit(context.Background(), req)
	c.event.Decision += c.g.since(t0)
	if err != nil {
		return err
	}
	c.held = admission{model: m, res: res, capPer: c.bound.MaxOutputTokens}
	if c.session.id != "" {
		if err := c.chargeSession(req); err != nil {
			c.release(&c.held)
			return err
		}
	}
	c.adm, c.ending = &c.held, endCharge
	c.event.Classes = res.Result().Classes
	c.event.Outcome, c.event.Status = outcomeAdmitted, 200
	return nil
}

// worstCost is the most bound may cost on m: every token priced at the
// higher of its text and audio rates (a response may hear and speak).
func worstCost(c *call, m *model, bound sluice.Usage) int64 {
	if c.ownKey != "" {
		return 0
	}
	p := m.Price
	if p.AudioInput > p.Input {
		bound.AudioInputTokens = bound.InputTokens
	}
	if p.AudioOutput > p.Output {
		bound.AudioOutputTokens = bound.OutputTokens
	}
	return p.Cost(bound)
}

// refuseResponse answers a refused response.create: an error event, and a
// close when the limit ends the session (see limitClose).
func (lc *liveConn) refuseResponse(r *liveResponse, err error, eventID string) {
	c := r.c
	err = c.withFitHint(err)
	c.event.Outcome, c.event.Class = outcomeOf(err)
	c.event.RefusedClass = refusedClass(err)
	c.event.Cause = causeOf(err)
	ev, status := lc.errorEvent(err, eventID)
	c.event.Status = status
	c.end()
	least := c.request(lc.model, 1).Max
	code, reason, cause := limitClose(err, least)
	if code == 0 {
		lc.sendError(ev)
		return
	}
	lc.end(code, reason, cause, ev)
}

// account follows a provider event: a response's id, its output so far,
// its end.
func (lc *liveConn) account(ev *openai.RealtimeServerEvent) {
	switch ev.Type {
	case "response.created":
		if ev.Response != nil {
			lc.created(ev.Response.ID)
		}
	case "response.done":
		if ev.Response != nil {
			lc.done(ev)
		}
	case "error":
		if ev.Error != nil && ev.Error.EventID != "" {
			lc.refusedUpstream(ev.Error.EventID)
		}
	default:
		if n := ev.OutputSoFar(); n > 0 {
			lc.mu.Lock()
			if r := lc.byID(ev.ResponseID); r != nil {
				r.output += n
			} else if r := lc.cancelled[ev.ResponseID]; r != nil {
				r.output += n
			}
			lc.mu.Unlock()
		}
	}
}

// created gives the oldest response not yet created its provider's id. A
// response nobody asked for (the provider's voice activity detection
// starts one by itself) is admitted now: refused, it is cancelled, and
// what it used before the cancel landed is charged with the connection
// (realtime_unsolicited.go).
func (lc *liveConn) created(id string) {
	lc.mu.Lock()
	i := slices.IndexFunc(lc.pending, func(r *liveResponse) bool { return r.id == "" })
	if i >= 0 {
		lc.pending[i].id = id
		lc.mu.Unlock()
		return
	}
	r := lc.newResponse(lc.lastInput+lc.appended, lc.sessionCap)
	r.id, r.appendedAt = id, lc.appended
	lc.mu.Unlock()
	if err := r.admit(); err != nil {
		lc.cancel(r)
		lc.refuseResponse(r, err, "")
		return
	}
	lc.mu.Lock()
	lc.pending = append(lc.pending, r)
	lc.mu.Unlock()
}

// done ends a response with its response.done: settled with the usage it
// reports (or, with none, its input estimate and the output seen), before
// the event is passed on, so a client that reads it finds it charged.
func (lc *liveConn) done(ev *openai.RealtimeServerEvent) {
	lc.mu.Lock()
	r := lc.byID(ev.Response.ID)
	if r == nil {
		lc.cancelledDone(ev)
		lc.mu.Unlock()
		return
	}
	lc.pending = slices.DeleteFunc(lc.pending, func(p *liveResponse) bool { return p == r })
	u := lc.usageOfDone(r, ev)
	lc.mu.Unlock()
	r.c.usage, r.c.reported = u, true
	r.c.end()
}

// usageOfDone is the usage r's response.done reports (or, with none, its
// input estimate and the output seen), and follows the conversation's
// size with it. lc.mu is held.
func (lc *liveConn) usageOfDone(r *liveResponse, ev *openai.RealtimeServerEvent) llm.Usage {
	u := llm.Usage{InputTokens: r.input, OutputTokens: r.output}
	reported := ev.Response.Usage != nil
	if reported {
		u = ev.Response.Usage.Usage()
	}
	if reported && !r.outOfBand {
		// The conversation is now what the provider read, plus its answer.
		lc.lastInput = u.InputTokens + u.OutputTokens
		lc.appended = max(0, lc.appended-r.appendedAt)
	}
	return u
}

// refusedUpstream gives back a response the provider refused (its error
// names the response.create's event_id) before creating it.
func (lc *liveConn) refusedUpstream(eventID string) {
	lc.mu.Lock()
	i := slices.IndexFunc(lc.pending, func(r *liveResponse) bool { return r.id == "" && r.eventID == eventID })
	if i < 0 {
		lc.mu.Unlock()
		return
	}
	r := lc.pending[i]
	lc.pending = slices.Delete(lc.pending, i, i+1)
	lc.mu.Unlock()
	r.c.ending = endRelease
	r.c.end()
}

// byID is the open response with the provider's id. lc.mu is held.
func (lc *liveConn) byID(id string) *liveResponse {
	if i := slices.IndexFunc(lc.pending, func(r *liveResponse) bool { return r.id == id }); i >= 0 {
		return lc.pending[i]
	}
	return nil
}

// remove takes r from the open responses.
func (lc *liveConn) remove(r *liveResponse) {
	lc.mu.Lock()
	lc.pending = slices.DeleteFunc(lc.pending, func(p *liveResponse) bool { return p == r })
	lc.mu.Unlock()
}

// abandon ends a response the connection's end cut: charged its input
// estimate and the output its deltas showed, as an abandoned stream is.
func (r *liveResponse) abandon() {
	r.c.usage, r.c.reported = llm.Usage{InputTokens: r.input, OutputTokens: r.output}, true
	r.c.cut = true
	r.c.end()
}
