package query

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Plot colours: fixed, so the browser test can find each figure in a
// screenshot by its colour.
var (
	colBaseline       = color.RGBA{R: 31, G: 119, B: 180, A: 255}  // blue
	colWindow         = color.RGBA{R: 214, G: 39, B: 40, A: 255}   // red
	colSignal         = color.RGBA{R: 44, G: 160, B: 44, A: 255}   // green
	colContribution   = color.RGBA{R: 148, G: 103, B: 189, A: 255} // purple
	colCounterfactual = color.RGBA{R: 255, G: 127, B: 14, A: 255}  // orange
	colHealth         = color.RGBA{R: 23, G: 190, B: 207, A: 255}  // teal
	colThreshold      = color.RGBA{R: 90, G: 90, B: 90, A: 255}    // grey
)

// plotNames are the figures of a report, in page order.
var plotNames = []string{"latency_cdf", "p99_signal", "contributions", "counterfactual", "health"}

const (
	plotW = 6 * vg.Inch
	plotH = 3.6 * vg.Inch
)

// cdf is a latency distribution given by its quantiles.
type cdf struct {
	levels []float64
	values []float64 // ms, same length as levels
	n      uint64
}

// quantileLevels are the levels of the distribution plots: every percent,
// and the far tail.
func quantileLevels() []float64 {
	var ls []float64
	for i := 1; i <= 99; i++ {
		ls = append(ls, float64(i)/100)
	}
	return append(ls, 0.995, 0.999, 1)
}

func cdfXYs(c cdf) plotter.XYs {
	var xy plotter.XYs
	for i, v := range c.values {
		if i < len(c.levels) && finite(v) {
			xy = append(xy, plotter.XY{X: v, Y: c.levels[i]})
		}
	}
	return xy
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

// note puts a message in an otherwise empty plot, so a figure without data
// says why instead of showing bare axes.
func note(p *plot.Plot, msg string) {
	p.Title.Text += " — " + msg
	p.HideAxes()
}

func svgOf(p *plot.Plot) ([]byte, error) {
	c := vgsvg.New(plotW, plotH)
	p.Draw(draw.New(c))
	return svgBytes(c)
}

func svgBytes(c *vgsvg.Canvas) ([]byte, error) {
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("write svg: %w", err)
	}
	// Drop the XML prolog so the document can be inlined in HTML.
	out := b.Bytes()
	if i := bytes.Index(out, []byte("<svg")); i > 0 {
		out = out[i:]
	}
	return out, nil
}

func line(xy plotter.XYs, c color.Color, width vg.Length, dashed bool) (*plotter.Line, error) {
	l, err := plotter.NewLine(xy)
	if err != nil {
		return nil, fmt.Errorf("build line: %w", err)
	}
	l.Color = c
	l.Width = width
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	return l, nil
}

// plotLatencyCDF: the latency distribution before (baseline) and during the
// window, with the SLO threshold.
func plotLatencyCDF(signal string, base, win cdf, threshold float64) ([]byte, error) {
	p := newPlot("Latency distribution: baseline vs window", signal+" (ms)", "fraction of requests ≤ x")
	bx, wx := cdfXYs(base), cdfXYs(win)
	if len(bx) == 0 && len(wx) == 0 {
		note(p, "no requests in range")
		return svgOf(p)
	}
	for _, s := range []struct {
		xy    plotter.XYs
		c     color.Color
		label string
	}{{bx, colBaseline, fmt.Sprintf("baseline (%d requests)", base.n)}, {wx, colWindow, fmt.Sprintf("window (%d requests)", win.n)}} {
		if len(s.xy) == 0 {
			continue
		}
		l, err := line(s.xy, s.c, vg.Points(2.5), false)
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add(s.label, l)
	}
	if finite(threshold) && threshold > 0 {
		l, err := line(plotter.XYs{{X: threshold, Y: 0}, {X: threshold, Y: 1}}, colThreshold, vg.Points(1), true)
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("SLO threshold %.0f ms", threshold), l)
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Left = false
	p.Legend.Top = false
	p.Legend.YOffs = vg.Points(10)
	return svgOf(p)
}

// seriesPoint is one minute of the P99-vs-signal figure.
type seriesPoint struct {
	minute time.Time
	p99    float64 // NaN without requests in scope
	signal float64 // NaN without requests on the culprit's entity
}

// plotP99Signal: P99 per minute (top panel) against the top culprit's
// signal on its entity (bottom panel), on one time axis, with the window
// shaded by its bounds.
func plotP99Signal(points []seriesPoint, threshold float64, window interval, sigLabel string) ([]byte, error) {
	top := newPlot("P99 per minute", "", "P99 (ms)")
	bottom := newPlot("Top culprit signal: "+sigLabel, "minute (UTC)", sigLabel)
	var pxy, sxy plotter.XYs
	for _, pt := range points {
		x := float64(pt.minute.Unix())
		if finite(pt.p99) {
			pxy = append(pxy, plotter.XY{X: x, Y: pt.p99})
		}
		if finite(pt.signal) {
			sxy = append(sxy, plotter.XY{X: x, Y: pt.signal})
		}
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Tick.Marker = plot.TimeTicks{Format: "15:04"}
		if len(points) > 0 {
			p.X.Min = float64(points[0].minute.Unix())
			p.X.Max = float64(points[len(points)-1].minute.Unix())
		}
	}
	if len(pxy) == 0 {
		note(top, "no requests in range")
	} else {
		l, err := line(pxy, colWindow, vg.Points(2), false)
		if err != nil {
			return nil, err
		}
		top.Add(l)
		top.Legend.Add("P99", l)
		if finite(threshold) && threshold > 0 {
			t, err := line(plotter.XYs{{X: top.X.Min, Y: threshold}, {X: top.X.Max, Y: threshold}}, colThreshold, vg.Points(1), true)
			if err != nil {
				return nil, err
			}
			top.Add(t)
			top.Legend.Add("threshold", t)
		}
	}
	if len(sxy) == 0 {
		note(bottom, "no data")
	} else {
		l, err := line(sxy, colSignal, vg.Points(2), false)
		if err != nil {
			return nil, err
		}
		bottom.Add(l)
	}
	for _, p := range []*plot.Plot{top, bottom} {
		if len(points) == 0 {
			continue
		}
		for _, t := range []time.Time{window.Start, window.End} {
			x := float64(t.Unix())
			if x < p.X.Min || x > p.X.Max {
				continue
			}
			lo, hi := 0.0, 1.0
			if p == top && len(pxy) > 0 {
				lo, hi = minMax(pxy)
			} else if p == bottom && len(sxy) > 0 {
				lo, hi = minMax(sxy)
			}
			if finite(threshold) && p == top && threshold > hi {
				hi = threshold
			}
			l, err := line(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}}, colThreshold, vg.Points(0.8), true)
			if err != nil {
				return nil, err
			}
			p.Add(l)
		}
	}
	c := vgsvg.New(plotW, plotH*1.4)
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(2), PadBottom: vg.Points(2), PadLeft: vg.Points(2), PadRight: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	return svgBytes(c)
}

func minMax(xy plotter.XYs) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range xy {
		lo, hi = math.Min(lo, p.Y), math.Max(hi, p.Y)
	}
	return lo, hi
}

// culpritLabel is "#1 kv_cache.preemption host=node-3", shortened.
func culpritLabel(c culpritDoc) string {
	s := fmt.Sprintf("#%d %s %s", c.Rank, c.Cause, entityLabel(c.Entity))
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// hbar draws horizontal bars, the first culprit on top.
func hbar(p *plot.Plot, values []float64, labels []string, c color.Color) error {
	n := len(values)
	rev := make(plotter.Values, n)
	revLabels := make([]string, n)
	for i := range values {
		rev[n-1-i] = values[i]
		revLabels[n-1-i] = labels[i]
	}
	b, err := plotter.NewBarChart(rev, vg.Points(14))
	if err != nil {
		return fmt.Errorf("build bar chart: %w", err)
	}
	b.Horizontal = true
	b.Color = c
	b.LineStyle.Width = 0
	p.Add(b)
	p.NominalY(revLabels...)
	return nil
}

// plotContributions: each culprit's attributable fraction of the tail.
func plotContributions(cs []culpritDoc) ([]byte, error) {
	p := newPlot("Contribution: attributable fraction of the tail", "attributable fraction", "")
	if len(cs) == 0 {
		note(p, "no culprits")
		return svgOf(p)
	}
	vals := make([]float64, len(cs))
	labels := make([]string, len(cs))
	for i, c := range cs {
		vals[i], labels[i] = c.AttributableFraction, culpritLabel(c)
	}
	if err := hbar(p, vals, labels, colContribution); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = 0, 1
	return svgOf(p)
}

// plotCounterfactual: the P99 had each cause been absent, against the
// observed and baseline P99 and the SLO threshold.
func plotCounterfactual(cs []culpritDoc, observed, baseline, threshold float64) ([]byte, error) {
	p := newPlot("Counterfactual P99 vs observed", "P99 (ms)", "")
	if len(cs) == 0 {
		note(p, "no culprits")
		return svgOf(p)
	}
	vals := make([]float64, len(cs))
	labels := make([]string, len(cs))
	hi := 0.0
	for i, c := range cs {
		vals[i], labels[i] = c.CounterfactualP99MS, culpritLabel(c)
		hi = math.Max(hi, c.CounterfactualP99MS)
	}
	if err := hbar(p, vals, labels, colCounterfactual); err != nil {
		return nil, err
	}
	y0, y1 := -0.5, float64(len(cs))-0.5
	for _, ref := range []struct {
		v      float64
		c      color.Color
		label  string
		dashed bool
	}{{observed, colWindow, "observed P99", false}, {baseline, colBaseline, "baseline P99", false}, {threshold, colThreshold, "SLO threshold", true}} {
		if !finite(ref.v) || ref.v <= 0 {
			continue
		}
		hi = math.Max(hi, ref.v)
		l, err := line(plotter.XYs{{X: ref.v, Y: y0}, {X: ref.v, Y: y1}}, ref.c, vg.Points(2), ref.dashed)
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s %.0f ms", ref.label, ref.v), l)
	}
	// An empty band above the bars holds the legend.
	p.Y.Min, p.Y.Max = y0, y1+math.Max(1, 0.35*float64(len(cs)))
	p.X.Min, p.X.Max = 0, hi*1.05
	p.Legend.Top = true
	p.Legend.Left = false
	return svgOf(p)
}

// plotHealth: the posterior health (0–1, 1 = like its healthy peers) of
// the least healthy engines, GPUs and hosts of the scope (entity_health),
// culprits or not; for documents without it, of each entity a culprit
// names (an entity named by several culprits shows its lowest health).
func plotHealth(cs []culpritDoc, eh []healthDoc) ([]byte, error) {
	p := newPlot("Health per entity (1 = behaves like its peers)", "health", "")
	var labels []string
	var vals []float64
	index := map[string]int{}
	add := func(l string, h float64) {
		if i, ok := index[l]; ok {
			vals[i] = math.Min(vals[i], h)
			return
		}
		if len(labels) >= 12 {
			return
		}
		index[l] = len(labels)
		if len(l) > 48 {
			l = l[:45] + "..."
		}
		labels = append(labels, l)
		vals = append(vals, h)
	}
	for _, h := range eh {
		add(h.Kind+" "+entityLabel(h.Entity), h.Health)
	}
	if len(eh) == 0 {
		for _, c := range cs {
			add(entityLabel(c.Entity), c.Health)
		}
	}
	if len(vals) == 0 {
		note(p, "no entities")
		return svgOf(p)
	}
	if err := hbar(p, vals, labels, colHealth); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = 0, 1
	return svgOf(p)
}

// causeSignal says which requests column shows a cause's mechanism over
// time: the second panel of the P99 figure.
type causeSignal struct {
	expr  string // SQL over requests (an expression of columns)
	label string
}

func signalFor(cause, latencyCol string) causeSignal {
	switch cause {
	case "kv_cache.preemption":
		return causeSignal{"kv_usage_max", "KV cache usage (max per request)"}
	case "queue.saturation":
		return causeSignal{"running_at_arrival + waiting_at_arrival", "requests in the engine at arrival (running + waiting)"}
	case "workload.long_prompts":
		return causeSignal{"toFloat64(prompt_tokens)", "prompt tokens"}
	case "workload.long_outputs":
		return causeSignal{"toFloat64(completion_tokens)", "completion tokens"}
	case "prefix_cache.miss":
		return causeSignal{"prefix_hit_ratio", "prefix-cache hit ratio"}
	case "engine.prefill_interference":
		return causeSignal{"stall_ms", "token stall time per request (ms)"}
	case "gpu.thermal_throttle", "gpu.power_cap":
		return causeSignal{"sm_clock_ratio", "SM clock / norm"}
	case "gpu.xid_error":
		return causeSignal{"toFloat64(xid_last != 0)", "share of requests with an XID"}
	case "gpu.pcie_contention":
		return causeSignal{"pcie_bytes_per_s_max", "PCIe bytes/s (max)"}
	case "gpu.memory_bandwidth":
		return causeSignal{"dram_active_max", "DRAM active (max)"}
	default: // entity.degraded, unknown causes: the entity's own latency
		return causeSignal{latencyCol, "mean " + strings.TrimSuffix(latencyCol, "_ms") + " on the entity (ms)"}
	}
}
