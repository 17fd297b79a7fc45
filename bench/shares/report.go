package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// phaseShares is what a phase measured over its samples after its first
// seconds: each class's part of the calls in flight, and how much of the
// cap they used together.
type phaseShares struct {
	phase
	samples int
	share   []float64 // per class, of the calls in flight
	used    float64   // of the cap, by every class
}

func (r *result) shares() []phaseShares {
	out := make([]phaseShares, len(phases))
	for i, ph := range phases {
		out[i] = phaseShares{phase: ph, share: make([]float64, len(classes))}
	}
	for _, s := range r.samples {
		if s.at < r.began[s.phase]+settle {
			continue
		}
		p := &out[s.phase]
		p.samples++
		for c, n := range s.inFlight {
			p.share[c] += float64(n)
			p.used += float64(n)
		}
	}
	for i := range out {
		p := &out[i]
		for c := range p.share {
			if p.used > 0 {
				p.share[c] /= p.used
			}
		}
		if p.samples > 0 {
			p.used /= float64(p.samples * capacity)
		}
	}
	return out
}

// broken lists the promises the run did not keep.
func (r *result) broken() []string {
	out := slices.Clone(r.errors)
	if r.maxTotal > capacity {
		out = append(out, fmt.Sprintf("the provider answered %d calls at once, over the cap of %d", r.maxTotal, capacity))
	}
	for _, p := range r.shares() {
		if p.samples == 0 {
			out = append(out, fmt.Sprintf("%s: no sample", p.name))
			continue
		}
		if p.used < r.o.busy {
			out = append(out, fmt.Sprintf("%s: the classes asking used %.1f %% of the cap, want at least %.0f %%", p.name, 100*p.used, 100*r.o.busy))
		}
		for c, cl := range classes {
			if !slices.Contains(p.active, cl.name) {
				continue
			}
			got := p.share[c]
			if got < cl.share-tolerance || p.exact && got > cl.share+tolerance {
				out = append(out, fmt.Sprintf("%s: %s had %.1f %% of the calls in flight, want %s", p.name, cl.name, 100*got, bound(p.exact, cl.share)))
			}
		}
	}
	return out
}

// bound says what a class's share must be in a phase.
func bound(exact bool, share float64) string {
	if exact {
		return fmt.Sprintf("%.1f ± %.0f %%", 100*share, 100*tolerance)
	}
	return fmt.Sprintf("at least %.1f %%", 100*(share-tolerance))
}

// markdown is the run's table.
func (r *result) markdown(command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "`%s`: %d replicas, a concurrency cap of %d shared by three classes, %d clients a class, calls held %s, phases of %s (the first %s of each left out).\n\n",
		command, r.o.replicas, capacity, r.o.clients, r.o.hold, r.o.phase, settle)
	b.WriteString("| phase | class | floor, weight | its share | its part of the calls in flight | holds |\n| --- | --- | --- | ---: | ---: | --- |\n")
	broken := strings.Join(r.broken(), "\n")
	for _, p := range r.shares() {
		for c, cl := range classes {
			if !slices.Contains(p.active, cl.name) {
				continue
			}
			holds := "yes"
			if strings.Contains(broken, p.name+": "+cl.name+" ") {
				holds = "**no**"
			}
			fmt.Fprintf(&b, "| %s | %s | %d, %d | %s | %.1f %% | %s |\n", p.name, cl.name, cl.floor, cl.weight, bound(p.exact, cl.share), 100*p.share[c], holds)
		}
		holds := "yes"
		if p.used < r.o.busy {
			holds = "**no**"
		}
		fmt.Fprintf(&b, "| %s | all asking: the cap used | | at least %.0f %% | %.1f %% | %s |\n", p.name, 100*r.o.busy, 100*p.used, holds)
	}
	fmt.Fprintf(&b, "\nAt most %d calls at the provider at once (cap %d), first %s; calls served: ", r.maxTotal, capacity, r.whenMax())
	for c, cl := range classes {
		if c > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", cl.name, r.served[c])
	}
	fmt.Fprintf(&b, "; 503 store_unavailable answers (tried again): %d.\n", r.unavailable)
	for _, e := range r.broken() {
		fmt.Fprintf(&b, "\nBROKEN: %s", e)
	}
	return b.String()
}

// writeCSV writes the samples: milliseconds since the load began, the
// phase, and the calls of each class in flight.
func (r *result) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"ms", "phase"}
	for _, c := range classes {
		head = append(head, c.name)
	}
	_ = w.Write(head)
	for _, s := range r.samples {
		row := []string{strconv.FormatInt(s.at.Milliseconds(), 10), phases[s.phase].name}
		for _, n := range s.inFlight {
			row = append(row, strconv.Itoa(n))
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writePNG draws each class's calls in flight over time, smoothed over
// half a second, with the cap and the phases.
func (r *result) writePNG(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Calls in flight per class, cap %d, %d replicas", capacity, r.o.replicas)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "calls in flight"
	p.Y.Min, p.Y.Max = 0, capacity+1
	colors := []color.RGBA{{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}}
	window := max(1, int(500*1e6/r.o.sample.Nanoseconds()))
	for c, cl := range classes {
		pts := make(plotter.XYs, len(r.samples))
		for i, s := range r.samples {
			lo := max(0, i-window+1)
			sum := 0
			for _, t := range r.samples[lo : i+1] {
				sum += t.inFlight[c]
			}
			pts[i] = plotter.XY{X: s.at.Seconds(), Y: float64(sum) / float64(i+1-lo)}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = colors[c%len(colors)], vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (floor %d, weight %d)", cl.name, cl.floor, cl.weight), l)
	}
	if len(r.samples) > 0 {
		end := r.samples[len(r.samples)-1].at.Seconds()
		capLine, err := plotter.NewLine(plotter.XYs{{X: 0, Y: capacity}, {X: end, Y: capacity}})
		if err != nil {
			return err
		}
		capLine.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(capLine)
		p.Legend.Add("cap", capLine)
	}
	for i, at := range r.began {
		l, err := plotter.NewLine(plotter.XYs{{X: at.Seconds(), Y: 0}, {X: at.Seconds(), Y: capacity + 1}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = color.Gray{Y: 0xa0}, []vg.Length{vg.Points(1), vg.Points(3)}
		p.Add(l)
		label, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: at.Seconds() + 0.2, Y: capacity + 0.5}}, Labels: []string{phases[i].name}})
		if err != nil {
			return err
		}
		p.Add(label)
	}
	// Top left, under the first phase's name, where the shares stay low.
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(10), vg.Points(-22)
	return p.Save(10*vg.Inch, 4.5*vg.Inch, path)
}

// whenMax says when the provider first answered the most calls at once:
// the phase, and how long after its start.
func (r *result) whenMax() string {
	phase := 0
	for i, at := range r.began {
		if r.maxAt >= at {
			phase = i
		}
	}
	if len(r.began) == 0 {
		return "before the load"
	}
	return fmt.Sprintf("in phase %q, %v after its start", phases[phase].name, (r.maxAt - r.began[phase]).Round(time.Millisecond))
}
