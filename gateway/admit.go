package gateway

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
)

// admission is a call admitted for one candidate model: the reservation
// its worst case holds, and the output cap sent with it.
type admission struct {
	model *model
	res   *sluice.Reservation
	// capPer is the output cap per completion sent to the provider;
	// clamped is set when a rule with fit: clamp lowered it.
	capPer  int64
	clamped bool
}

// admit admits the call for cand: by the limiter's rules, then against
// cand's context window and the call's session, whose refusals give the
// admission back.
func (c *call) admit(cand *model) (*admission, error) {
	endAdmit := c.trace.admitSpan(cand.Name)
	adm, err := c.admitRules(cand)
	endAdmit(err)
	if err != nil {
		return nil, err
	}
	// Counted once admitted, so that only calls the key's limits let
	// through make the gateway count a prompt (see checkContext).
	if err := c.checkContext(cand); err != nil {
		c.release(adm)
		return nil, err
	}
	if c.session.id != "" {
		if err := c.chargeSession(c.request(cand, adm.capPer)); err != nil {
			c.release(adm)
			return nil, err
		}
	}
	return adm, nil
}

// admitRules admits the call for cand by the limiter's rules. When a rule
// with fit: clamp refuses, it admits with the largest output cap that fits,
// if that is at least the rule's min_output_tokens.
func (c *call) admitRules(cand *model) (*admission, error) {
	capPer := c.outputCap(cand)
	req := c.request(cand, capPer)
	ctx := context.Background()
	t0 := c.g.now()
	var w *clientWatch
	if c.maxWait > 0 {
		// Batch work may wait: bounded, and given up when the client goes
		// (a client that gives up must not have its call admitted, charged
		// or sent upstream). A call that does not wait needs neither (the
		// stores bound their own calls), nor the timer a deadline costs on
		// every admission.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.maxWait+c.g.opts.RequestTimeout)
		defer cancel()
		if c.ctx.Conn() != nil {
			w = watchClient(c.ctx.Conn(), 0, cancel)
		}
	}
	res, err := c.g.limiter.Admit(ctx, req)
	if w != nil {
		w.stop()
		if err != nil && errors.Is(err, context.Canceled) {
			return nil, errClientGone()
		}
	}
	c.event.Decision += c.g.since(t0)
	if err == nil {
		c.held = admission{model: cand, res: res, capPer: capPer}
		return &c.held, nil
	}
	if c.bound.NoOutput || capPer == 0 {
		return nil, err
	}
	return c.admitClamped(ctx, cand, capPer, err)
}

// admitClamped admits the call for cand with the largest output cap that
// fits the rule with fit: clamp that refused it (refused, the error of its
// full cap).
func (c *call) admitClamped(ctx context.Context, cand *model, capPer int64, refused error) (*admission, error) {
	rule, ok := c.g.clampRule(refused)
	if !ok {
		return nil, refused
	}
	fit, err := c.g.limiter.Fit(ctx, c.request(cand, capPer))
	if err != nil {
		return nil, refused
	}
	perCompletion := fit / c.bound.N
	// Below the request's own floor (16 for Responses, above the thinking
	// budget for Anthropic) the provider would refuse the clamped call.
	if floor := min(capPer, max(1, rule.MinOutputTokens, c.bound.MinOutputTokens)); perCompletion < floor {
		// Even the floor does not fit now. The answer is the refusal of
		// the smallest call the rule would clamp to: a spent budget's
		// (terminal, with its reset) or a bucket's (retry later), and 413
		// only when no period could ever hold it. A clamp rule never
		// answers 413 to a call it would clamp another day.
		perCompletion = floor
	}
	res, err := c.g.limiter.Admit(ctx, c.request(cand, perCompletion))
	if err != nil {
		return nil, err
	}
	c.held = admission{model: cand, res: res, capPer: perCompletion, clamped: perCompletion < capPer}
	return &c.held, nil
}

// refusingRule names the rule behind a refusal by a limit, if it is one.
func refusingRule(err error) (string, bool) {
	var rl *sluice.RateLimitError
	var bz *sluice.BusyError
	var bu *sluice.BudgetError
	var tl *sluice.TooLargeError
	switch {
	case errors.As(err, &rl):
		return rl.Rule, true
	case errors.As(err, &bz):
		return bz.Rule, true
	case errors.As(err, &bu):
		return bu.Rule, true
	case errors.As(err, &tl):
		return tl.Rule, true
	}
	return "", false
}

// clampRule returns the rule behind a refusal when it lets the gateway
// clamp the output cap. A concurrency rule never does: a smaller call
// takes the same place.
func (g *Gateway) clampRule(err error) (sluice.Rule, bool) {
	name, ok := refusingRule(err)
	if !ok || errors.Is(err, sluice.ErrBusy) {
		return sluice.Rule{}, false
	}
	for _, r := range g.limiter.Policy().Rules {
		if r.Name == name && r.Fit == "clamp" {
			return r, true
		}
	}
	return sluice.Rule{}, false
}

// modelScoped reports whether the rule that refused belongs to the model
// itself (matches it, or counts per model), so another model may serve.
func (g *Gateway) modelScoped(err error, cand *model) bool {
	name, ok := refusingRule(err)
	if !ok {
		return false
	}
	for _, r := range g.limiter.Policy().Rules {
		if r.Name == name {
			return slices.Contains(r.Match.Models, cand.Name) || slices.Contains(strings.Split(r.Subject, "+"), "model")
		}
	}
	return false
}
