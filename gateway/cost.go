package gateway

import (
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/valyala/fasthttp"
)

// HeaderCostMicros carries a non-streamed answer's settled cost in
// micro-dollars: what the ledger and the cost budgets are charged for it.
const HeaderCostMicros = "X-Sluice-Cost-Micros"

// settledCost returns what finish charges the call in micro-dollars: the
// reported usage priced, or the reservation's bound when nothing (or
// nothing possible) was reported. It is not known for a call made with the
// client's own provider key (Sluice does not price those) nor for a model
// without a price.
func (c *call) settledCost(adm *admission, u llm.Usage, reported bool) (int64, bool) {
	cand := adm.model
	if c.ownKey != "" || cand.Price == (sluice.Price{}) {
		return 0, false
	}
	if reported && !c.impossible(adm, u) {
		if su := c.settleUsage(cand, u); !su.IsZero() {
			return su.Cost, true
		}
	}
	return c.request(cand, adm.capPer).Max.Cost, true
}

// setCostHeader writes HeaderCostMicros when the cost is known.
func (c *call) setCostHeader(h *fasthttp.ResponseHeader, adm *admission, u llm.Usage, reported bool) {
	if cost, ok := c.settledCost(adm, u, reported); ok {
		canonicalHeaders{h}.Set(HeaderCostMicros, strconv.FormatInt(cost, 10))
	}
}
