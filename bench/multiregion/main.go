// Command multiregion simulates a global budget split into regional
// allocations that a coordinator rebalances every period
// (docs/multi-region.md), under scripted loads, and prints for each the
// overshoot against its bound.
//
//	go run -C bench ./multiregion
package main

import (
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
)

func main() {
	period := flag.Int("period", 1000, "rebalancing period, ms")
	delay := flag.Int("delay", 200, "time from the usage reports to the new allocations, ms (at most -period)")
	regions := flag.Int("regions", 3, "regions")
	searched := flag.Int("search", 5000, "random loads searched for the worst overshoot")
	flag.Parse()
	if *delay > *period || *delay < 1 || *regions < 2 {
		fmt.Fprintln(os.Stderr, "multiregion: need 1 <= -delay <= -period and -regions >= 2")
		os.Exit(2)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "load\tmode\tspent / budget\tovershoot\tbound\tovershoot / bound\trefused with room left\t")
	row := func(name string, s Scenario, r Result) {
		ratio := "-"
		if r.Bound > 0 {
			ratio = fmt.Sprintf("%.0f %%", 100*float64(r.Overshoot)/float64(r.Bound))
		}
		fmt.Fprintf(w, "%s\t%s\t%.4f\t%d\t%d\t%s\t%d\t\n", name, s.Mode, float64(r.Spent)/float64(s.Budget),
			r.Overshoot, r.Bound, ratio, r.RefusedWithRoom)
	}
	for _, s := range Scenarios(*regions, *period, *delay) {
		row(s.Name, s, Run(s))
	}
	for _, m := range []Mode{Snapshot, Acknowledged} {
		s, r := Worst(m, *searched, 1)
		row(fmt.Sprintf("worst of %d random (%d regions, delay %d ms)", *searched, s.Regions, s.Delay), s, r)
	}
	w.Flush()
}

// Scenarios are the scripted loads, each in both modes: a budget of
// 1,000,000 tokens, regions peaking at 1,000 tokens a millisecond.
func Scenarios(regions, period, delay int) []Scenario {
	const budget, peak = 1_000_000, 1_000
	ticks := 60 * period
	loads := []struct {
		name   string
		demand func(r, t int) int64
		cut    func(r, t int) bool
	}{
		// Every region at a steady tenth of its peak: the budget runs out
		// in the middle of the run.
		{"steady", func(r, t int) int64 { return peak / 10 }, nil},
		// One region at a time at its peak, a different one each period:
		// the shares always lag the demand.
		{"moving", func(r, t int) int64 {
			if (t/period)%regions == r {
				return peak / 4
			}
			return 0
		}, nil},
		// Every region bursts at its peak just after each rebalance's
		// reports, taking under its old allocation what the coordinator is
		// giving to the others: the load that makes the bound tight.
		{"after-report", func(r, t int) int64 {
			if t%period > 0 && t%period <= delay {
				return peak
			}
			return 1
		}, nil},
		// Steady, with the last region cut off from the coordinator for the
		// middle third of the run.
		{"partition", func(r, t int) int64 { return peak / 10 }, func(r, t int) bool {
			return r == regions-1 && t > ticks/3 && t < 2*ticks/3
		}},
	}
	var out []Scenario
	for _, l := range loads {
		for _, m := range []Mode{Snapshot, Acknowledged} {
			out = append(out, Scenario{Name: l.name, Mode: m, Regions: regions, Budget: budget, Period: period, Delay: delay,
				Ticks: ticks, Demand: l.demand, PeakRate: peak, Cut: l.cut})
		}
	}
	return out
}
