package faultlab

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The scenario calibration: every fault scenario must be an incident (a
// clear P99 breach of its target model's e2e latency, through its own
// mechanism) and the fault-free ones must not. See TestScenarioCalibration.

// e2eOf is the request span's end-to-end latency (gen_ai.latency.e2e).
func e2eOf(r reqRec) float64 { return r.e2e }

// modelOf maps pods to models from the truth's fleet.
func modelOf(tr *Truth) map[string]string {
	m := map[string]string{}
	for _, e := range tr.Fleet.Engines {
		m[e.Pod] = e.Model
	}
	return m
}

// modelP99 is the P99 of e2e latency of model's requests that started in
// [from, to), with the number of requests.
func (c *capture) modelP99(pods map[string]string, model string, from, to time.Duration) (float64, int) {
	var xs []float64
	for _, r := range c.reqs {
		if pods[r.pod] == model && r.start >= from && r.start < to {
			xs = append(xs, e2eOf(r))
		}
	}
	return quantile(xs, 0.99), len(xs)
}

// --- calibration acceptance --------------------------------------------------

// calibRow is one row of the calibration table: a fault of one run.
type calibRow struct {
	scenario, cause, model string
	seed                   uint64
	before, during         float64 // P99 e2e, seconds
	nBefore, nDuring       int
}

func (r calibRow) ratio() float64 { return r.during / r.before }

// breachRows computes, for every fault of a run, the P99 of the e2e latency
// of the fault's model over [onset, end) and over [start, onset), from the
// request spans (start time in the interval).
func breachRows(c *capture, tr *Truth, seed uint64) []calibRow {
	pods := modelOf(tr)
	var rows []calibRow
	for _, f := range tr.Faults {
		on, off := f.Onset.Sub(tr.Start), f.End.Sub(tr.Start)
		r := calibRow{scenario: tr.Scenario, cause: f.Cause, model: f.Entity.Model, seed: seed}
		if r.model == "" && len(f.Affected) > 0 { // a host: the model its engines serve
			r.model = f.Affected[0].Model
		}
		r.before, r.nBefore = c.modelP99(pods, r.model, 0, on)
		r.during, r.nDuring = c.modelP99(pods, r.model, on, off)
		rows = append(rows, r)
	}
	return rows
}

// calibWindows are the comparison windows of the mechanism checks: the
// healthy part after the first minute, and the fault after its first minute.
func calibWindows(tr *Truth, f TruthFault) (before, during [2]time.Duration) {
	on, off := f.Onset.Sub(tr.Start), f.End.Sub(tr.Start)
	return [2]time.Duration{time.Minute, on}, [2]time.Duration{on + time.Minute, off}
}

// counterRate is a counter's increase per second over w.
func (c *capture) counterRate(name, key string, w [2]time.Duration) float64 {
	return c.increase(name, key, w[0], w[1]) / (w[1] - w[0]).Seconds()
}

func (c *capture) gpuMedian(name, gpu string, w [2]time.Duration) float64 {
	return median(values(c.series(name, gpu, w[0], w[1])))
}

// reasonShare is the share of the GPU's clock-event samples in w with any
// of the bits set.
func (c *capture) reasonShare(gpu string, w [2]time.Duration, bits uint64) float64 {
	ps := c.series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu, w[0], w[1])
	n := 0
	for _, p := range ps {
		if uint64(p.value)&bits != 0 {
			n++
		}
	}
	return float64(n) / float64(max(1, len(ps)))
}

func p99Of(rs []reqRec, f func(reqRec) float64) float64 { return quantile(field(rs, f), 0.99) }

// checkMechanism asserts that the fault's own mechanism is the visible
// change (and, for decoys, that the decoy stays harmless), and returns a
// one-line summary of what it measured.
func checkMechanism(t *testing.T, c *capture, tr *Truth, fi int) string {
	t.Helper()
	f := tr.Faults[fi]
	before, during := calibWindows(tr, f)
	pod := f.Entity.Pod
	gpu := gpuKey(tr, f.Entity.GPU)
	ratio := func(pod string, fn func(reqRec) float64, q float64) float64 {
		b := quantile(field(c.window(pod, before[0], before[1]), fn), q)
		d := quantile(field(c.window(pod, during[0], during[1]), fn), q)
		return d / b
	}
	// The e2e P99 of one engine, over the whole fault as the breach is.
	on, off := f.Onset.Sub(tr.Start), f.End.Sub(tr.Start)
	e2eRatio := func(pod string) float64 {
		return p99Of(c.window(pod, on, off), e2eOf) / p99Of(c.window(pod, 0, on), e2eOf)
	}
	var sum []string
	note := func(format string, a ...any) { sum = append(sum, fmt.Sprintf(format, a...)) }
	fail := func(format string, a ...any) {
		t.Errorf("%s/%s: "+format, append([]any{tr.Scenario, f.Cause}, a...)...)
	}
	modelPods := func(m string) []string {
		var out []string
		for _, e := range tr.Fleet.Engines {
			if e.Model == m {
				out = append(out, e.Pod)
			}
		}
		return out
	}
	modelReqs := func(m string, w [2]time.Duration) []reqRec {
		var out []reqRec
		for _, p := range modelPods(m) {
			out = append(out, c.window(p, w[0], w[1])...)
		}
		return out
	}
	// An engine-level fault is the largest change of its model's engines.
	if pod != "" {
		target := e2eRatio(pod)
		note("%s e2e p99 ×%.2f", pod, target)
		if target < 1.8 {
			fail("%s: e2e p99 ×%.2f, want ≥ ×1.8 on the faulty engine", pod, target)
		}
		for _, p := range modelPods(f.Entity.Model) {
			if p == pod {
				continue
			}
			if r := e2eRatio(p); r > 1.3 || 1.5*r > target {
				fail("bystander %s: e2e p99 ×%.2f (target ×%.2f)", p, r, target)
			}
		}
	}
	tpot := func(p string) float64 { return ratio(p, reqRec.tpot, 0.5) }
	switch f.Cause {
	case "kv_cache.preemption":
		peak := 0.0
		for _, v := range values(c.series("vllm:kv_cache_usage_perc", pod, during[0], during[1])) {
			peak = math.Max(peak, v)
		}
		pre := c.increase("vllm:num_preemptions_total", pod, during[0], during[1])
		note("kv peak %.2f, %v preemptions", peak, pre)
		if peak < 0.9 || pre < 20 {
			fail("%s: KV peak %.2f, %v preemptions; want ≥ 0.9 and ≥ 20", pod, peak, pre)
		}
		for _, e := range tr.Fleet.Engines {
			if n := c.increase("vllm:num_preemptions_total", e.Pod, 0, tr.End.Sub(tr.Start)); e.Pod != pod && n != 0 {
				fail("%s (no fault): %v preemptions", e.Pod, n)
			}
		}
	case "queue.saturation":
		share := func(r reqRec) float64 { return r.queue / r.ttft }
		var sb, sd, wd []float64
		pods := modelPods(f.Entity.Model)
		if pod != "" {
			pods = []string{pod} // traffic forced onto one engine: its peers idle
		}
		for _, p := range pods {
			sb = append(sb, field(c.window(p, before[0], before[1]), share)...)
			sd = append(sd, field(c.window(p, during[0], during[1]), share)...)
			wd = append(wd, values(c.series("vllm:num_requests_waiting", p, during[0], during[1]))...)
		}
		note("queue share of TTFT %.2f → %.2f, waiting %.0f", median(sb), median(sd), median(wd))
		if !(median(sb) < 0.3 && median(sd) > 0.6 && median(wd) >= 5) {
			fail("queue share of TTFT %.2f → %.2f, waiting %.0f; want < 0.3 → > 0.6, ≥ 5", median(sb), median(sd), median(wd))
		}
	case "workload.long_prompts", "workload.long_outputs":
		tok := func(r reqRec) float64 { return float64(r.prompt) }
		if f.Cause == "workload.long_outputs" {
			tok = func(r reqRec) float64 { return float64(r.completion) }
		}
		rb, rd := modelReqs(f.Entity.Model, before), modelReqs(f.Entity.Model, during)
		mix := median(field(rd, tok)) / median(field(rb, tok))
		note("token median ×%.2f", mix)
		if mix < 0.8*(1+f.Magnitude) {
			fail("token median ×%.2f, want ≥ ×%.2f", mix, 0.8*(1+f.Magnitude))
		}
		if f.Cause == "workload.long_prompts" {
			var kb, kd, pre float64
			for _, p := range modelPods(f.Entity.Model) {
				kb += mean(values(c.series("vllm:kv_cache_usage_perc", p, before[0], before[1])))
				kd += mean(values(c.series("vllm:kv_cache_usage_perc", p, during[0], during[1])))
				pre += c.increase("vllm:num_preemptions_total", p, 0, tr.End.Sub(tr.Start))
			}
			note("KV usage ×%.2f, %v preemptions", kd/kb, pre)
			// The decoy: KV usage rises with the prompts, with no KV fault
			// behind it (no preemption storm).
			if kd < 1.3*kb || pre > 0.002*float64(len(rd)) {
				fail("KV usage %.3f → %.3f, %v preemptions for %d requests: want ≥ ×1.3 and no preemption storm", kb, kd, pre, len(rd))
			}
		}
	case "prefix_cache.miss":
		qb := c.increase("vllm:prefix_cache_queries_total", pod, before[0], before[1])
		hb := c.increase("vllm:prefix_cache_hits_total", pod, before[0], before[1])
		hd := c.increase("vllm:prefix_cache_hits_total", pod, during[0], during[1])
		pr := ratio(pod, ttftOf, 0.5)
		note("hit ratio %.2f → hits %v, TTFT p50 ×%.2f", hb/qb, hd, pr)
		if hb/qb < 0.3 || hd != 0 || pr < 1.5 {
			fail("%s: hit ratio %.2f → hits %v, TTFT p50 ×%.2f; want ≥ 0.3 → 0, ≥ ×1.5", pod, hb/qb, hd, pr)
		}
	case "engine.prefill_interference":
		pb := c.counterRate("vllm:prompt_tokens_total", pod, before)
		pd := c.counterRate("vllm:prompt_tokens_total", pod, during)
		var peers []float64
		for _, p := range modelPods(f.Entity.Model) {
			if p != pod {
				peers = append(peers, c.counterRate("vllm:prompt_tokens_total", p, during))
			}
		}
		stall := ratio(pod, reqRec.tpot, 0.99)
		note("prompt tok/s %.0f → %.0f (peers %.0f), TPOT p99 ×%.2f", pb, pd, median(peers), stall)
		if pd < 1.5*pb || pd < 1.5*median(peers) || stall < 2 {
			fail("%s: prompt tok/s %.0f → %.0f (peers %.0f), TPOT p99 ×%.2f; want ×1.5 up, above peers, stalls ×2", pod, pb, pd, median(peers), stall)
		}
	case "gpu.thermal_throttle", "gpu.power_cap":
		bits := uint64(reasonSWThermal | reasonHWThermal)
		if f.Cause == "gpu.power_cap" {
			bits = reasonSWPowerCap | reasonHWPowerBrak
		}
		clk := c.gpuMedian("DCGM_FI_DEV_SM_CLOCK", gpu, during)
		rs := c.reasonShare(gpu, during, bits)
		tp := tpot(pod)
		note("%s clock %.0f MHz, reasons %#x in %.0f%%, TPOT p50 ×%.2f", gpu, clk, bits, 100*rs, tp)
		if clk > 0.8*1980 || rs < 0.5 || tp < 1.5 {
			fail("%s: clock %.0f MHz, reason bits %#x in %.0f%% of samples, TPOT ×%.2f; want ≤ %.0f, ≥ 50%%, ≥ ×1.5", gpu, clk, bits, 100*rs, tp, 0.8*1980)
		}
	case "gpu.xid_error":
		errs := map[string]int{}
		for _, r := range c.reqs {
			if r.failed {
				errs[r.pod]++
			}
		}
		xid := 0.0
		for _, v := range values(c.series("DCGM_FI_DEV_XID_ERRORS", gpu, during[0], during[1])) {
			xid = math.Max(xid, v)
		}
		note("XID %v, error spans %v", xid, errs[pod])
		if int(xid) != f.XID || errs[pod] < 10 || len(errs) != 1 {
			fail("%s: XID %v, error spans by pod %v; want %d and errors on %s only", gpu, xid, errs, f.XID, pod)
		}
	case "gpu.pcie_contention":
		rx := c.gpuMedian("DCGM_FI_PROF_PCIE_RX_BYTES", gpu, during)
		tp := tpot(pod)
		note("%s PCIe RX %.1f GB/s, TPOT p50 ×%.2f", gpu, rx/1e9, tp)
		if rx < 20e9 || tp < 1.5 {
			fail("%s: PCIe RX %.3g B/s, TPOT ×%.2f", gpu, rx, tp)
		}
	case "gpu.memory_bandwidth":
		dram := c.gpuMedian("DCGM_FI_PROF_DRAM_ACTIVE", gpu, during)
		tp := tpot(pod)
		note("%s DRAM active %.2f, TPOT p50 ×%.2f", gpu, dram, tp)
		if dram < 0.8 || tp < 1.5 {
			fail("%s: DRAM active %.2f, TPOT ×%.2f", gpu, dram, tp)
		}
	case "entity.degraded":
		pods := []string{pod}
		if pod == "" { // a host: every engine on it
			pods = nil
			for _, a := range f.Affected {
				pods = append(pods, a.Pod)
			}
			if len(pods) < 2 {
				fail("host %s: %d engines affected", f.Entity.Host, len(pods))
			}
		}
		for _, p := range pods {
			tp := tpot(p)
			note("%s TPOT p50 ×%.2f", p, tp)
			if !(tp >= 1.5) {
				fail("%s: TPOT ×%.2f", p, tp)
			}
		}
		for _, e := range tr.Fleet.Engines {
			if !slices.Contains(pods, e.Pod) {
				continue
			}
			for _, uuid := range e.GPUs {
				g := gpuKey(tr, uuid)
				clk, dram := c.gpuMedian("DCGM_FI_DEV_SM_CLOCK", g, during), c.gpuMedian("DCGM_FI_PROF_DRAM_ACTIVE", g, during)
				if clk != 1980 || dram > 0.7 || c.reasonShare(g, during, ^uint64(reasonGPUIdle)) > 0 {
					fail("%s: clock %.0f, DRAM %.2f or clock reasons: no telemetry may explain a degraded entity", g, clk, dram)
				}
			}
			if n := c.increase("vllm:num_preemptions_total", e.Pod, during[0], during[1]); n != 0 {
				fail("%s: %v preemptions", e.Pod, n)
			}
		}
	}
	// Decoys move their metric and slow nothing.
	for _, d := range tr.Decoys {
		key := gpuKey(tr, d.Entity.GPU)
		tp := tpot(d.Entity.Pod)
		note("decoy %s on %s: TPOT p50 ×%.2f", d.Cause, key, tp)
		if r := e2eRatio(d.Entity.Pod); tp > 1.1 || r > 1.3 {
			fail("decoy %s on %s slowed %s: TPOT ×%.2f, e2e p99 ×%.2f", d.Cause, key, d.Entity.Pod, tp, r)
		}
		dw := [2]time.Duration{d.Onset.Sub(tr.Start) + time.Minute, d.End.Sub(tr.Start)}
		switch d.Cause {
		case "gpu.pcie_traffic":
			if rx := c.gpuMedian("DCGM_FI_PROF_PCIE_RX_BYTES", key, dw); rx < 5e9 {
				fail("decoy %s: PCIe RX %.3g B/s: the decoy should move", key, rx)
			}
		case "gpu.temperature":
			tb := c.gpuMedian("DCGM_FI_DEV_GPU_TEMP", key, before)
			td := c.gpuMedian("DCGM_FI_DEV_GPU_TEMP", key, dw)
			if td < tb+0.5*d.Magnitude || c.reasonShare(key, dw, ^uint64(reasonGPUIdle)) > 0 {
				fail("decoy %s: temperature %v → %v C or clock reasons set", key, tb, td)
			}
		}
	}
	return strings.Join(sum, "; ")
}

// TestScenarioCalibration is the acceptance test of the scenario
// calibration: every fault scenario breaks the P99 of its target model's
// e2e latency (fault period ≥ 1.6× the time before it) through its own
// mechanism, the decoys stay decoys, and the fault-free scenarios keep every
// model's P99 within ±15% between [0, 40%) and [40%, 70%) of the run.
// By default it runs seed 1 for 10 simulated minutes per scenario;
// FAULTLAB_CALIBRATION=full runs the acceptance table (seeds 1–3, 20
// minutes) and prints it.
func TestScenarioCalibration(t *testing.T) {
	d, seeds := 10*time.Minute, []uint64{1}
	if os.Getenv("FAULTLAB_CALIBRATION") == "full" {
		d, seeds = 20*time.Minute, []uint64{1, 2, 3}
	}
	if v := os.Getenv("FAULTLAB_CALIBRATION_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	list, err := ListScenarios()
	if err != nil {
		t.Fatal(err)
	}
	var table, stab strings.Builder
	fmt.Fprintf(&table, "%-24s %-28s %-14s %4s %9s %9s %6s  mechanism\n", "scenario", "cause", "model", "seed", "p99 pre", "p99 fault", "ratio")
	fmt.Fprintf(&stab, "%-14s %4s %-14s %9s %9s %6s\n", "scenario", "seed", "model", "p99 0-40%", "p99 40-70%", "ratio")
	var wall time.Duration
	runs := 0
	only := os.Getenv("FAULTLAB_CALIBRATION_ONLY") // comma-separated scenario names
	for _, sc := range list {
		if only != "" && !slices.Contains(strings.Split(only, ","), sc.Name) {
			continue
		}
		for _, seed := range seeds {
			t0 := time.Now()
			c, tr := runCapture(t, scenarioConfig(t, sc.Name, d, seed))
			wall += time.Since(t0)
			runs++
			if len(sc.Causes) == 0 {
				pods := modelOf(tr)
				for _, m := range tr.Stats.Models {
					a, _ := c.modelP99(pods, m.Model, 0, d*4/10)
					b, _ := c.modelP99(pods, m.Model, d*4/10, d*7/10)
					fmt.Fprintf(&stab, "%-14s %4d %-14s %8.2fs %8.2fs %6.2f\n", sc.Name, seed, m.Model, a, b, b/a)
					if r := b / a; r < 0.85 || r > 1.15 {
						t.Errorf("%s seed %d: %s P99 %.2fs → %.2fs (×%.2f) with no fault, want within ±15%%", sc.Name, seed, m.Model, a, b, r)
					}
				}
				continue
			}
			for i, r := range breachRows(c, tr, seed) {
				mech := checkMechanism(t, c, tr, i)
				fmt.Fprintf(&table, "%-24s %-28s %-14s %4d %8.2fs %8.2fs %6.2f  %s\n", r.scenario, r.cause, r.model, r.seed, r.before, r.during, r.ratio(), mech)
				if !(r.ratio() >= 1.6) {
					t.Errorf("%s seed %d: %s P99 %.2fs (%d requests) → %.2fs (%d) over the fault, ×%.2f; want ≥ ×1.6",
						r.scenario, seed, r.model, r.before, r.nBefore, r.during, r.nDuring, r.ratio())
				}
			}
		}
	}
	t.Logf("P99 of e2e latency of the target model, before the fault vs during it (%v runs):\n%s", d, table.String())
	t.Logf("fault-free stability:\n%s", stab.String())
	t.Logf("%d runs of %v in %v (%.0f sim-s/wall-s with the capturing sink)", runs, d, wall.Truncate(time.Millisecond), float64(runs)*d.Seconds()/wall.Seconds())
}
