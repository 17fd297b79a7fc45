package main

import "math/rand/v2"

// The simulation of docs/multi-region.md: regions admit against an
// allocation of a global budget kept in their own store, and a coordinator
// rebalances the allocations every period from the usage the regions
// report. Time moves in ticks of a millisecond; spending is a fluid of
// tokens, each region wanting Demand(region, tick) tokens a tick and
// admitting what its allocation leaves room for.

// Mode is how a new allocation reaches a region.
type Mode int

const (
	// Snapshot sends each region its new allocation as an absolute limit,
	// computed from the usage reported at the start of the rebalance: a
	// region may spend, under its old allocation, what the coordinator has
	// meanwhile given to another. Overshoot at most (Regions-1) times the
	// peak rate times Delay.
	Snapshot Mode = iota
	// Acknowledged shrinks an allocation before the room it frees is given
	// to another region: the region lowers its limit (never below what it
	// has used) and answers with what it gave up, and only that is granted.
	// No overshoot; moving room takes two deliveries instead of one.
	Acknowledged
)

func (m Mode) String() string {
	if m == Acknowledged {
		return "acknowledged"
	}
	return "snapshot"
}

// Scenario is one scripted run.
type Scenario struct {
	Name    string
	Mode    Mode
	Regions int
	Budget  int64
	// Period is the rebalancing period and Delay the time from a
	// rebalance's usage reports to its allocations taking effect (at most
	// Period), in ticks.
	Period, Delay int
	Ticks         int
	// Demand is the tokens region r wants at tick t; at most PeakRate.
	Demand   func(r, t int) int64
	PeakRate int64
	// Cut, when set, tells whether region r is cut off from the
	// coordinator at tick t: its reports and its allocations are lost.
	Cut func(r, t int) bool
}

// Result is what a run measured.
type Result struct {
	Spent     int64 // tokens admitted in every region
	Overshoot int64 // Spent beyond Budget (0 when within)
	Bound     int64 // (Regions-1) * PeakRate * Delay (0 for Acknowledged)
	// Refused counts the tokens refused while the global budget still had
	// at least that much room left: the price of allocations.
	RefusedWithRoom int64
}

type region struct {
	used, limit int64
	// reported is the usage the coordinator last heard of, and granted the
	// limit it last knows the region to have.
	reported, granted int64
	// reportedLimit is the limit the region had at its last report: a
	// region cut off has either it or the limit sent after that report.
	reportedLimit int64
	lastRate      int64 // tokens over the last period, for the shares
	// heard is the last rebalance whose allocation reached the region
	// (Snapshot).
	heard int
}

// message is an allocation (or, acknowledged, a change of one) on its way.
type message struct {
	at     int
	region int
	limit  int64 // Snapshot: the new limit
	round  int   // Snapshot: the rebalance it comes from
	shrink int64 // Acknowledged: lower the limit to this (-1: no shrink)
	grow   int64 // Acknowledged: raise the limit by this
}

// Run plays s and returns what it measured.
func Run(s Scenario) Result {
	rs := make([]region, s.Regions)
	for r := range rs {
		// The period opens with an even split.
		rs[r].limit = s.Budget / int64(s.Regions)
		rs[r].granted = rs[r].limit
	}
	cut := func(r, t int) bool { return s.Cut != nil && s.Cut(r, t) }
	var inbox []message
	var acks []message // Acknowledged: what regions gave up, on its way back
	var res Result
	spent := int64(0)
	for t := 0; t < s.Ticks; t++ {
		// Deliveries due now.
		keep := inbox[:0]
		for _, m := range inbox {
			if m.at > t {
				keep = append(keep, m)
				continue
			}
			if cut(m.region, t) {
				continue // lost: the region keeps the limit it has
			}
			g := &rs[m.region]
			if s.Mode == Snapshot {
				g.limit, g.heard = m.limit, m.round
				continue
			}
			if m.shrink >= 0 {
				// Never below what it has used, and never up: a shrink
				// sent before an earlier one's answer was back must not
				// undo it.
				was := g.limit
				g.limit = min(g.limit, max(m.shrink, g.used))
				acks = append(acks, message{at: t + s.Delay, region: m.region, grow: was - g.limit})
			}
			g.limit += m.grow
		}
		inbox = keep
		// Snapshot: a region whose allocation did not come when due (it,
		// or the coordinator, was cut off) admits nothing beyond what it
		// has used until one does: the coordinator may have given its room
		// to others.
		if k := (t - s.Delay) / s.Period; s.Mode == Snapshot && k > 0 && (t-s.Delay)%s.Period == 0 {
			for r := range rs {
				if rs[r].heard < k {
					rs[r].limit = min(rs[r].limit, rs[r].used)
				}
			}
		}
		for i := 0; i < len(acks); i++ {
			if a := acks[i]; a.at <= t {
				if !cut(a.region, t) {
					rs[a.region].granted -= a.grow
				}
				acks = append(acks[:i], acks[i+1:]...)
				i--
			}
		}
		// Spending.
		for r := range rs {
			want := min(s.Demand(r, t), s.PeakRate)
			g := &rs[r]
			got := max(min(want, g.limit-g.used), 0)
			g.used += got
			spent += got
			if refused := want - got; refused > 0 {
				res.RefusedWithRoom += min(refused, max(s.Budget-spent, 0))
			}
		}
		// A rebalance starts: the regions' reports arrive, the coordinator
		// decides, and its allocations take effect Delay ticks later.
		if t > 0 && t%s.Period == 0 {
			inbox = append(inbox, rebalance(s, rs, t, cut)...)
		}
	}
	res.Spent = spent
	res.Overshoot = max(spent-s.Budget, 0)
	if s.Mode == Snapshot {
		res.Bound = int64(s.Regions-1) * s.PeakRate * int64(s.Delay)
	}
	return res
}

// rebalance gives out the budget's remainder by each region's spending over
// the last period (plus one token, so an idle region keeps a share). A
// region cut off is assumed to spend its whole allocation: its room is
// never given to another.
func rebalance(s Scenario, rs []region, t int, cut func(r, t int) bool) []message {
	var used, weights int64
	for r := range rs {
		g := &rs[r]
		if cut(r, t) {
			used += max(g.granted, g.reportedLimit, g.reported)
			continue
		}
		g.lastRate = g.used - g.reported
		g.reported, g.reportedLimit = g.used, g.limit
		used += g.used
		weights += g.lastRate + 1
	}
	free := max(s.Budget-used, 0)
	var out []message
	at := t + s.Delay
	if s.Mode == Snapshot {
		for r := range rs {
			g := &rs[r]
			if cut(r, t) {
				continue
			}
			g.granted = g.reported + free*(g.lastRate+1)/weights
			out = append(out, message{at: at, region: r, limit: g.granted, round: t / s.Period})
		}
		return out
	}
	// Acknowledged: the coordinator's grants are counted before they
	// arrive, and a region's room only once its answer says it gave it up,
	// so the limits never add up to more than the budget. The room not yet
	// granted (the budget less every limit
	// the coordinator knows of) is given out now; a region above its share
	// is asked to shrink, and what it gives up is granted by a later
	// rebalance, once its answer is back.
	var granted int64
	for r := range rs {
		granted += rs[r].granted
	}
	unclaimed := max(s.Budget-granted, 0)
	for r := range rs {
		g := &rs[r]
		if cut(r, t) {
			continue
		}
		target := g.reported + free*(g.lastRate+1)/weights
		m := message{at: at, region: r, shrink: -1}
		switch {
		case target < g.granted:
			m.shrink = target
		case target > g.granted && unclaimed > 0:
			m.grow = min(target-g.granted, unclaimed)
			unclaimed -= m.grow
			g.granted += m.grow
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// RandomScenario is a load scripted at random per region and period (idle,
// at its peak in the window after a rebalance's reports, at its peak after
// that window, or steady at an eighth of it), with, one time in four, a
// region cut off for a stretch: the search for the loads that make the
// bound tight.
func RandomScenario(rng *rand.Rand, mode Mode) Scenario {
	const period, periods, peak = 100, 20, 1000
	regions := 2 + rng.IntN(3)
	delay := 1 + rng.IntN(period)
	kinds := make([][]int, regions)
	for r := range kinds {
		kinds[r] = make([]int, periods+1)
		for k := range kinds[r] {
			kinds[r][k] = rng.IntN(4)
		}
	}
	s := Scenario{Name: "random", Mode: mode, Regions: regions, Budget: int64(50_000 + rng.IntN(1_000_000)),
		Period: period, Delay: delay, Ticks: periods * period, PeakRate: peak}
	s.Demand = func(r, t int) int64 {
		k, in := t/period, t%period
		switch kinds[r][k] {
		case 1:
			if in > 0 && in <= delay {
				return peak
			}
		case 2:
			if in > delay {
				return peak
			}
		case 3:
			return peak / 8
		}
		return 0
	}
	if rng.IntN(4) == 0 {
		who, from := rng.IntN(regions), rng.IntN(s.Ticks)
		until := from + rng.IntN(s.Ticks-from+1)
		s.Cut = func(r, t int) bool { return r == who && t >= from && t < until }
	}
	return s
}

// Worst runs n random scenarios in mode and returns the largest overshoot
// against its bound (the largest overshoot, for Acknowledged).
func Worst(mode Mode, n int, seed uint64) (Scenario, Result) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var worst Scenario
	var wr Result
	best := -1.0
	for range n {
		s := RandomScenario(rng, mode)
		r := Run(s)
		q := float64(r.Overshoot)
		if r.Bound > 0 {
			q /= float64(r.Bound)
		}
		if q > best {
			best, worst, wr = q, s, r
		}
	}
	return worst, wr
}
