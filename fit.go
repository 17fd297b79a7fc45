package sluice

import (
	"context"
	"math/big"
)

// Fit returns the largest output cap, at most req.Max.OutputTokens, that
// the request's output-dependent charges (worst-case reservations of
// output_tokens, tokens and cost on rate and budget rules) would admit now;
// 0 when even no output fits. Other rules are left to Admit. Cost rules use
// req.OutputPrice to turn money into tokens. Nothing is charged.
func (l *Limiter) Fit(ctx context.Context, req Request) (int64, error) {
	if err := req.Max.validate(); err != nil {
		return 0, err
	}
	r := &Reservation{l: l}
	now := l.clock.Now()
	if err := l.build(l.policy.Load(), &req, now, r, true); err != nil {
		if _, tooLarge := err.(*TooLargeError); !tooLarge {
			return 0, err
		}
		// A request too large for a rule may still fit with a smaller
		// cap: build again without output to look at the room.
		smaller := req
		smaller.Max.OutputTokens = 0
		smaller.Max.Cost = costWithoutOutput(&req)
		if err := l.build(l.policy.Load(), &smaller, now, r, true); err != nil {
			return 0, nil
		}
	}
	if len(r.charges.in) == 0 {
		return req.Max.OutputTokens, nil
	}
	if err := l.store.Peek(ctx, now, r.batch(), r.charges.out); err != nil {
		return 0, &StoreError{Op: "peek", Err: err}
	}
	best := req.Max.OutputTokens
	for i := range r.charges.in {
		c := r.charges.at(i)
		rule := c.rule
		if c.Shadow || c.Kind == KindConcurrency || rule.Reserve != "" && rule.Reserve != ReserveWorstCase {
			continue
		}
		var room int64
		switch rule.metric {
		case MetricOutputTokens:
			room = c.Remaining
		case MetricTokens:
			room = c.Remaining - req.Max.InputTokens
		case MetricCost:
			if req.OutputPrice <= 0 {
				continue
			}
			room = outputFor(c.Remaining, &req)
		default:
			continue
		}
		best = max(0, min(best, room))
	}
	return best, nil
}

// costWithoutOutput is the part of req.Max.Cost that is not output, at
// most (Max.Cost was rounded up).
func costWithoutOutput(req *Request) int64 {
	out := Price{Output: req.OutputPrice}.Cost(Usage{OutputTokens: req.Max.OutputTokens})
	return max(0, req.Max.Cost-out)
}

// outputFor returns the most output tokens whose cost, added to the input
// part of req.Max.Cost, stays within money. Max.Cost is a rounded-up total,
// so the input part is taken at its largest: Max.Cost*1e6 - output*price in
// millionths of a micro-dollar. The answer may be one token short of the
// exact optimum, never over.
func outputFor(money int64, req *Request) int64 {
	// ((money - Max.Cost)*1e6 + Max.OutputTokens*price) / price, exactly.
	n := new(big.Int).Mul(big.NewInt(money-req.Max.Cost), big.NewInt(1_000_000))
	n.Add(n, new(big.Int).Mul(big.NewInt(req.Max.OutputTokens), big.NewInt(req.OutputPrice)))
	if n.Sign() < 0 {
		return 0
	}
	n.Quo(n, big.NewInt(req.OutputPrice))
	if !n.IsInt64() {
		return 1<<62 - 1
	}
	return min(n.Int64(), 1<<62-1)
}
