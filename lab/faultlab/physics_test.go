package faultlab

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// Property tests of the physics: each runs the default fleet with one fault
// and checks the mechanism shows where, and only where, it should.

const (
	propRun = 15 * time.Minute
	propOn  = 6 * time.Minute // 40%
	propOff = 10*time.Minute + 30*time.Second
)

// before and during are the comparison windows: healthy warm-up excluded,
// and the first minute of the fault skipped so its effect has set in.
var (
	before = [2]time.Duration{time.Minute, propOn}
	during = [2]time.Duration{propOn + time.Minute, propOff}
)

func ttftOf(r reqRec) float64    { return r.ttft }
func queueOf(r reqRec) float64   { return r.queue }
func prefillOf(r reqRec) float64 { return r.prefill }

func (c *capture) med(pod string, w [2]time.Duration, f func(reqRec) float64) float64 {
	return median(field(c.window(pod, w[0], w[1]), f))
}

func gpuKey(tr *Truth, uuid string) string {
	for _, h := range tr.Fleet.Hosts {
		for _, g := range h.GPUs {
			if g.UUID == uuid {
				return fmt.Sprintf("%s/%d", h.Name, g.Index)
			}
		}
	}
	return ""
}

// KV full ⇒ preemptions and recompute, on that engine only.
func TestPhysicsKVFullPreempts(t *testing.T) {
	for _, seed := range []uint64{1, 7} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			c, tr := runCapture(t, scenarioConfig(t, "kv_cache_preemption", propRun, seed))
			pod := tr.Faults[0].Entity.Pod
			if got := c.increase("vllm:num_preemptions_total", pod, 0, propOn); got != 0 {
				t.Errorf("%s: %v preemptions before the fault", pod, got)
			}
			pre := c.increase("vllm:num_preemptions_total", pod, propOn, propOff)
			rec := c.increase("vllm:prompt_tokens_recomputed_total", pod, propOn, propOff)
			if pre < 10 || rec <= 0 {
				t.Errorf("%s during the fault: %v preemptions, %v recomputed tokens; want ≥ 10 and > 0", pod, pre, rec)
			}
			peak := 0.0
			for _, v := range values(c.series("vllm:kv_cache_usage_perc", pod, propOn, propOff)) {
				peak = math.Max(peak, v)
			}
			if peak < 0.85 {
				t.Errorf("%s: peak KV usage %.2f during the fault, want ≥ 0.85", pod, peak)
			}
			for _, e := range tr.Fleet.Engines {
				if e.Pod == pod {
					continue
				}
				if n := c.increase("vllm:num_preemptions_total", e.Pod, 0, propRun); n != 0 {
					t.Errorf("%s (no fault): %v preemptions", e.Pod, n)
				}
			}
			p99b := quantile(field(c.window(pod, before[0], before[1]), ttftOf), 0.99)
			p99d := quantile(field(c.window(pod, during[0], during[1]), ttftOf), 0.99)
			if !(p99d > 2*p99b) {
				t.Errorf("%s: TTFT p99 %.3fs → %.3fs, want it at least doubled", pod, p99b, p99d)
			}
		})
	}
}

// A KV fault that leaves less cache than a long prompt needs: the engine
// refuses those prompts (failed spans) and keeps serving the others. It used
// to prefill a chunk of the long prompt, preempt it and start again for
// ever, and no request finished until the fault ended.
func TestPhysicsKVShrunkBelowAPromptKeepsServing(t *testing.T) {
	cfg := scenarioConfig(t, "kv_cache_preemption", propRun, 1)
	cfg.Scenario.Faults[0].Magnitude = 0.99
	c, tr := runCapture(t, cfg)
	pod := tr.Faults[0].Entity.Pod
	finished, refused := 0, 0
	for _, r := range c.window(pod, propOff-2*time.Minute, propOff) {
		if !r.failed {
			finished++
		}
	}
	for _, r := range c.window(pod, propOn, propOff) {
		if r.failed {
			refused++
		}
	}
	if finished < 20 || refused == 0 {
		t.Fatalf("%s: %d requests finished in the fault's last two minutes, %d refused during it; want ≥ 20 and some", pod, finished, refused)
	}
}

// The KV cache never hands out more blocks than it has, preempted requests
// run again and finish, and every block comes back: checked after every
// event of a small overloaded engine with a shrunken cache.
func TestPhysicsKVInvariants(t *testing.T) {
	for _, seed := range []uint64{3, 4, 5} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Seed = seed
			cfg.Duration = 4 * time.Minute
			cfg.Fleet = FleetSpec{
				Hosts: []HostSpec{{Name: "h", GPU: "H100", GPUs: 1}},
				Models: []ModelSpec{{Name: "llama-3.1-8b", Engines: 1, TP: 1, Rate: 6,
					Workload: []StreamSpec{{Trace: "mooncake-conversation", Share: 1}}}},
			}
			cfg.StepSpanShare = 1
			// A cold start: the engine is overloaded on purpose, and a
			// warm-up would leave a backlog that no 4-minute run drains.
			cfg.Warmup = -1
			cfg.Scenario = &Scenario{Name: "tiny", Faults: []FaultSpec{{Cause: "kv_cache.preemption",
				Target: Target{Pod: "llama-3-1-8b-0"}, Onset: "10%", Duration: "80%", Magnitude: 0.9}}}
			cfg = cfg.resolved()
			c := newCapture(DefaultStart())
			s, err := newSim(cfg, c)
			if err != nil {
				t.Fatal(err)
			}
			e := s.f.engines[0]
			steps := 0
			s.afterEvent = func(ev event) {
				kv := e.kv
				// A capacity change takes effect at the next step start, where
				// the scheduler preempts down to the new size.
				if ev.kind == evStep && e.busy {
					steps++
					if kv.used() > kv.total || kv.free()+kv.evictable() < 0 {
						t.Fatalf("t=%v: %d blocks used of %d (free %d, evictable %d)", time.Duration(s.now), kv.used(), kv.total, kv.free(), kv.evictable())
					}
				}
				if kv.private < 0 || kv.pinnedSegs < 0 || kv.pinnedSegs > kv.cachedSegs || len(kv.index) != kv.cachedSegs {
					t.Fatalf("t=%v: bad accounting: private %d, pinned %d, cached %d, indexed %d", time.Duration(s.now), kv.private, kv.pinnedSegs, kv.cachedSegs, len(kv.index))
				}
				held := 0
				for _, r := range e.running {
					held += int(r.private)
				}
				if held != kv.private {
					t.Fatalf("t=%v: requests hold %d private blocks, cache says %d", time.Duration(s.now), held, kv.private)
				}
			}
			if err := s.loop(context.Background(), runOptions{}); err != nil {
				t.Fatal(err)
			}
			if e.cnt.preemptions == 0 {
				t.Fatal("no preemption: the property was not exercised")
			}
			var retracted, finished int
			for _, r := range c.reqs {
				if r.failed {
					continue
				}
				finished++
				if r.completion < 1 || r.ttft > (r.end-r.start).Seconds() {
					t.Fatalf("request %+v: no tokens or TTFT past its end", r)
				}
			}
			retracted = int(s.stats.preemptions)
			if finished == 0 || c.stepSpans["decode_loop"] == 0 {
				t.Fatalf("finished %d requests, %d decode_loop spans", finished, c.stepSpans["decode_loop"])
			}
			t.Logf("%d steps, %d preemptions, %d finished", steps, retracted, finished)
		})
	}
}

// Throttled clock ⇒ slower decode on that GPU's engine only.
func TestPhysicsThrottleSlowsOnlyThatGPU(t *testing.T) {
	c, tr := runCapture(t, scenarioConfig(t, "thermal_throttle", propRun, 1))
	f := tr.Faults[0]
	key := gpuKey(tr, f.Entity.GPU)
	clocks := values(c.series("DCGM_FI_DEV_SM_CLOCK", key, during[0], during[1]))
	if m := median(clocks); !(m < 0.85*1980) {
		t.Errorf("%s: median SM clock %.0f MHz during the fault, want < %.0f", key, m, 0.85*1980)
	}
	thermal := 0
	reasons := c.series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", key, during[0], during[1])
	for _, p := range reasons {
		if uint64(p.value)&(reasonSWThermal|reasonHWThermal) != 0 {
			thermal++
		}
	}
	if thermal*2 < len(reasons) {
		t.Errorf("%s: thermal reason set in %d of %d samples", key, thermal, len(reasons))
	}
	if temp := median(values(c.series("DCGM_FI_DEV_GPU_TEMP", key, during[0], during[1]))); temp < 80 {
		t.Errorf("%s: median temperature %.0f C during the fault, want ≥ 80", key, temp)
	}
	for _, h := range tr.Fleet.Hosts {
		for _, g := range h.GPUs {
			k := fmt.Sprintf("%s/%d", h.Name, g.Index)
			if k == key {
				continue
			}
			for _, p := range c.series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", k, 0, propRun) {
				if uint64(p.value)&(reasonSWThermal|reasonHWThermal|reasonSWPowerCap) != 0 {
					t.Fatalf("%s (no fault) has clock event reasons %#x at %v", k, uint64(p.value), p.at)
				}
			}
		}
	}
	target := f.Entity.Pod
	for _, e := range tr.Fleet.Engines {
		if e.Model != "llama-3.1-8b" {
			continue
		}
		b := c.med(e.Pod, before, reqRec.tpot)
		d := c.med(e.Pod, during, reqRec.tpot)
		ratio := d / b
		if e.Pod == target {
			if ratio < 1.15 {
				t.Errorf("throttled %s: TPOT %.1f → %.1f ms (×%.2f), want ≥ ×1.15", e.Pod, 1000*b, 1000*d, ratio)
			}
		} else if ratio > 1.08 || ratio < 0.92 {
			t.Errorf("unthrottled %s: TPOT %.1f → %.1f ms (×%.2f), want within 8%%", e.Pod, 1000*b, 1000*d, ratio)
		}
	}
}

// Prefix hits ⇒ shorter prefill: the same arrivals with the prefix cache
// on and off.
func TestPhysicsPrefixHitsShortenPrefill(t *testing.T) {
	const pod = "llama-3-1-70b-0"
	base := DefaultConfig()
	base.Duration = 12 * time.Minute
	on, _ := runCapture(t, base)
	off := base
	off.Scenario = &Scenario{Name: "no_prefix_cache", Faults: []FaultSpec{{Cause: "prefix_cache.miss",
		Target: Target{Pod: pod}, Onset: "0s", Duration: "100%", Magnitude: 1}}}
	offc, _ := runCapture(t, off)

	hitsOn := on.increase("vllm:prefix_cache_hits_total", pod, 0, base.Duration)
	qOn := on.increase("vllm:prefix_cache_queries_total", pod, 0, base.Duration)
	if hitsOn/qOn < 0.15 {
		t.Errorf("cache on: hit ratio %.2f, want ≥ 0.15", hitsOn/qOn)
	}
	if h := offc.increase("vllm:prefix_cache_hits_total", pod, 0, base.Duration); h != 0 {
		t.Errorf("cache off: %v hit tokens, want 0", h)
	}
	w := [2]time.Duration{2 * time.Minute, 11 * time.Minute}
	perTok := func(r reqRec) float64 { return r.prefill / float64(r.prompt) }
	a := mean(field(on.window(pod, w[0], w[1]), perTok))
	b := mean(field(offc.window(pod, w[0], w[1]), perTok))
	if !(a < 0.85*b) {
		t.Errorf("prefill per prompt token: %.3f ms with hits, %.3f ms without; want hits ≥ 15%% faster", 1000*a, 1000*b)
	}
	if len(on.window(pod, w[0], w[1])) != len(offc.window(pod, w[0], w[1])) {
		t.Errorf("arrivals differ between the runs: %d vs %d", len(on.window(pod, w[0], w[1])), len(offc.window(pod, w[0], w[1])))
	}
}

// Overload ⇒ queueing before the model: waiting requests pile up and time
// in queue, not time in the model, makes up TTFT.
func TestPhysicsOverloadQueues(t *testing.T) {
	c, tr := runCapture(t, scenarioConfig(t, "queue_saturation", propRun, 1))
	pod := tr.Faults[0].Affected[0].Pod
	share := func(r reqRec) float64 { return r.queue / r.ttft }
	sb, sd := c.med(pod, before, share), c.med(pod, during, share)
	if !(sb < 0.3 && sd > 0.6) {
		t.Errorf("%s: median queue share of TTFT %.2f → %.2f, want < 0.3 → > 0.6", pod, sb, sd)
	}
	if w := median(values(c.series("vllm:num_requests_waiting", pod, during[0], during[1]))); w < 5 {
		t.Errorf("%s: median waiting %v during the surge, want ≥ 5", pod, w)
	}
	pb, pd := c.med(pod, before, prefillOf), c.med(pod, during, prefillOf)
	qb, qd := c.med(pod, before, queueOf), c.med(pod, during, queueOf)
	if !(qd-qb > 3*(pd-pb)) {
		t.Errorf("%s: queue grew %.2fs, prefill %.2fs: want the queue to dominate", pod, qd-qb, pd-pb)
	}
}

func tpotRatio(c *capture, pod string) float64 {
	return c.med(pod, during, reqRec.tpot) / c.med(pod, before, reqRec.tpot)
}

// TestXIDEffectsEnd: an XID fault whose one XID (at onset) hangs and
// restarts its engine lasts on in the GPU's XID code; the truth says when
// the event's effects ended, and no request fails after that.
func TestXIDEffectsEnd(t *testing.T) {
	cfg := scenarioConfig(t, "xid_error", propRun, 1)
	f := &cfg.Scenario.Faults[0]
	f.Magnitude, f.Duration = 0.2, "3m" // the next XID would come 2.5–7.5 min after the first
	c, tr := runCapture(t, cfg)
	tf := tr.Faults[0]
	if want := tf.Onset.Add(xidHang + xidRestart); !tf.EffectsEnd.Equal(want) {
		t.Fatalf("effects end %v, want %v (onset + hang + restart); the fault ends %v", tf.EffectsEnd, want, tf.End)
	}
	failed := 0
	for _, r := range c.reqs {
		if !r.failed {
			continue
		}
		failed++
		if at := c.start.Add(r.end); at.After(tf.EffectsEnd) {
			t.Errorf("%s: a request failed at %v, after the effects' end %v", r.pod, at, tf.EffectsEnd)
		}
	}
	if failed == 0 {
		t.Error("no request failed: the XID did nothing")
	}
}

// Every other cause shows its own signature on its target.
func TestFaultSignatures(t *testing.T) {
	type check func(t *testing.T, c *capture, tr *Truth, pod, gpu string)
	gpuMedian := func(c *capture, name, gpu string) float64 {
		return median(values(c.series(name, gpu, during[0], during[1])))
	}
	slower := func(min float64) check {
		return func(t *testing.T, c *capture, _ *Truth, pod, _ string) {
			if r := tpotRatio(c, pod); !(r >= min) {
				t.Errorf("%s: TPOT ×%.2f, want ≥ ×%.2f", pod, r, min)
			}
		}
	}
	cases := []struct {
		scenario string
		checks   []check
	}{
		{"power_cap", []check{slower(1.2), func(t *testing.T, c *capture, _ *Truth, _, gpu string) {
			if m := gpuMedian(c, "DCGM_FI_DEV_SM_CLOCK", gpu); m > 0.8*1980 {
				t.Errorf("%s: SM clock %.0f", gpu, m)
			}
			if m := gpuMedian(c, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu); uint64(m)&reasonSWPowerCap == 0 {
				t.Errorf("%s: reasons %#x lack sw power cap", gpu, uint64(m))
			}
		}}},
		{"pcie_contention", []check{slower(1.4), func(t *testing.T, c *capture, _ *Truth, _, gpu string) {
			if m := gpuMedian(c, "DCGM_FI_PROF_PCIE_RX_BYTES", gpu); m < 20e9 {
				t.Errorf("%s: PCIe RX %.3g B/s", gpu, m)
			}
		}}},
		{"memory_bandwidth", []check{slower(1.4), func(t *testing.T, c *capture, _ *Truth, _, gpu string) {
			if m := gpuMedian(c, "DCGM_FI_PROF_DRAM_ACTIVE", gpu); m < 0.8 {
				t.Errorf("%s: DRAM active %.2f", gpu, m)
			}
		}}},
		{"entity_degraded", []check{slower(1.3), func(t *testing.T, c *capture, tr *Truth, pod, _ string) {
			for _, e := range tr.Fleet.Engines {
				if e.Pod != pod {
					continue
				}
				for _, uuid := range e.GPUs {
					g := gpuKey(tr, uuid)
					if m := gpuMedian(c, "DCGM_FI_DEV_SM_CLOCK", g); m != 1980 {
						t.Errorf("%s: SM clock %.0f: degraded must not show in clocks", g, m)
					}
					if m := gpuMedian(c, "DCGM_FI_PROF_DRAM_ACTIVE", g); m > 0.7 {
						t.Errorf("%s: DRAM active %.2f: degraded must not show in DRAM", g, m)
					}
				}
			}
		}}},
		{"host_degraded", []check{func(t *testing.T, c *capture, tr *Truth, _, _ string) {
			// Every engine of the host slows (node-1's are bystanders below).
			slow := map[string]bool{}
			for _, a := range tr.Faults[0].Affected {
				slow[a.Pod] = true
				if a.Host != "node-2" {
					t.Errorf("affected %s on %s, want node-2", a.Pod, a.Host)
				}
				if r := tpotRatio(c, a.Pod); r < 1.3 {
					t.Errorf("%s: TPOT ×%.2f, want ≥ ×1.3", a.Pod, r)
				}
			}
			if len(slow) != 4 {
				t.Errorf("%d engines affected, want node-2's 4", len(slow))
			}
		}}},
		{"prefill_interference", []check{func(t *testing.T, c *capture, _ *Truth, pod, _ string) {
			b := quantile(field(c.window(pod, before[0], before[1]), reqRec.tpot), 0.99)
			d := quantile(field(c.window(pod, during[0], during[1]), reqRec.tpot), 0.99)
			if !(d > 1.5*b) {
				t.Errorf("%s: TPOT p99 %.0f → %.0f ms, want ×1.5", pod, 1000*b, 1000*d)
			}
			// vllm:iteration_tokens_total: the token-weighted mean step
			// grows with the budget (large prefills in one step).
			step := func(w [2]time.Duration) float64 {
				return c.increase("vllm:iteration_tokens_total:s2", pod, w[0], w[1]) / c.increase("vllm:iteration_tokens_total:s1", pod, w[0], w[1])
			}
			if sb, sd := step(before), step(during); !(sd > 1.5*sb) {
				t.Errorf("%s: token-weighted step %.0f → %.0f tokens, want ×1.5", pod, sb, sd)
			}
		}}},
		{"xid_error", []check{func(t *testing.T, c *capture, tr *Truth, pod, gpu string) {
			if m := gpuMedian(c, "DCGM_FI_DEV_XID_ERRORS", gpu); m != 13 {
				t.Errorf("%s: XID gauge %v, want 13", gpu, m)
			}
			errs := map[string]int{}
			for _, r := range c.reqs {
				if r.failed {
					errs[r.pod]++
				}
			}
			if errs[pod] == 0 || len(errs) != 1 {
				t.Errorf("error spans by pod %v, want only %s", errs, pod)
			}
		}}},
		{"long_prompts_kv_decoy", []check{func(t *testing.T, c *capture, tr *Truth, _, _ string) {
			for _, a := range tr.Faults[0].Affected {
				pb := c.med(a.Pod, before, func(r reqRec) float64 { return float64(r.prompt) })
				pd := c.med(a.Pod, during, func(r reqRec) float64 { return float64(r.prompt) })
				if pd < 1.4*pb {
					t.Errorf("%s: prompt median %v → %v", a.Pod, pb, pd)
				}
				kb := mean(values(c.series("vllm:kv_cache_usage_perc", a.Pod, before[0], before[1])))
				kd := mean(values(c.series("vllm:kv_cache_usage_perc", a.Pod, during[0], during[1])))
				if kd < 1.3*kb {
					t.Errorf("%s: KV usage %.3f → %.3f: the decoy should move", a.Pod, kb, kd)
				}
				if n := c.increase("vllm:num_preemptions_total", a.Pod, 0, propRun); n != 0 {
					t.Errorf("%s: %v preemptions: there is no KV fault", a.Pod, n)
				}
			}
		}}},
		{"thermal_throttle_decoy", []check{slower(1.15), func(t *testing.T, c *capture, tr *Truth, _, _ string) {
			// The decoys move their metrics and nothing else.
			if m := gpuMedian(c, "DCGM_FI_PROF_PCIE_RX_BYTES", "node-3/0"); m < 5e9 {
				t.Errorf("node-3/0: PCIe RX %.3g B/s: the decoy should move", m)
			}
			if r := tpotRatio(c, "qwen2-5-32b-0"); r > 1.1 {
				t.Errorf("qwen2-5-32b-0 under a harmless PCIe decoy: TPOT ×%.2f", r)
			}
			tb := median(values(c.series("DCGM_FI_DEV_GPU_TEMP", "node-2/2", before[0], before[1])))
			td := gpuMedian(c, "DCGM_FI_DEV_GPU_TEMP", "node-2/2")
			if td < tb+5 {
				t.Errorf("node-2/2: temperature %v → %v C: the decoy should move", tb, td)
			}
			for _, p := range c.series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "node-2/2", 0, propRun) {
				if uint64(p.value)&^reasonGPUIdle != 0 {
					t.Fatalf("node-2/2 (decoy): clock event reasons %#x", uint64(p.value))
				}
			}
		}}},
		{"long_outputs", []check{func(t *testing.T, c *capture, tr *Truth, _, _ string) {
			for _, a := range tr.Faults[0].Affected {
				ob := c.med(a.Pod, before, func(r reqRec) float64 { return float64(r.completion) })
				od := c.med(a.Pod, during, func(r reqRec) float64 { return float64(r.completion) })
				if od < 2.5*ob { // outputs ×3 (magnitude 2)
					t.Errorf("%s: completion median %v → %v", a.Pod, ob, od)
				}
			}
		}}},
		{"prefix_cache_miss", []check{func(t *testing.T, c *capture, _ *Truth, pod, _ string) {
			hb := c.increase("vllm:prefix_cache_hits_total", pod, before[0], before[1])
			hd := c.increase("vllm:prefix_cache_hits_total", pod, during[0], during[1])
			if hb == 0 || hd != 0 {
				t.Errorf("%s: hit tokens %v → %v", pod, hb, hd)
			}
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.scenario, func(t *testing.T) {
			c, tr := runCapture(t, scenarioConfig(t, tc.scenario, propRun, 1))
			f := tr.Faults[0]
			pod := f.Entity.Pod
			gpu := gpuKey(tr, f.Entity.GPU)
			for _, ch := range tc.checks {
				ch(t, c, tr, pod, gpu)
			}
			// No other engine of the fleet may degrade much (the router
			// shifts some load, and XID restarts shift more).
			if f.Entity.Model != "" && f.Entity.Pod == "" {
				return
			}
			affected := map[string]bool{}
			for _, a := range f.Affected {
				affected[a.Pod] = true
			}
			for _, e := range tr.Fleet.Engines {
				if e.Pod == pod || affected[e.Pod] || e.Model != "llama-3.1-8b" {
					continue
				}
				if r := tpotRatio(c, e.Pod); r > 1.12 {
					t.Errorf("bystander %s: TPOT ×%.2f", e.Pod, r)
				}
			}
		})
	}
}

func mean(xs []float64) float64 {
	s, n := 0.0, 0
	for _, x := range xs {
		if !math.IsNaN(x) {
			s += x
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return s / float64(n)
}

// The router policies: round-robin and random keep a slow pod's share of
// the arrivals, a least-loaded router steers requests away from it; an
// unknown policy does not validate.
func TestRouterPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates")
	}
	const slow = "llama-3-1-8b-6"
	share := map[RouterPolicy]float64{}
	for _, p := range RouterPolicies() {
		cfg := scenarioConfig(t, "entity_degraded", 10*time.Minute, 1)
		cfg.Router = p
		c, _ := runCapture(t, cfg)
		// During the fault (40–70% of the run), the slow pod's requests
		// over the mean of its model's pods.
		pods := map[string]int{}
		for _, r := range c.window("", 4*time.Minute, 7*time.Minute) {
			if strings.HasPrefix(r.pod, "llama-3-1-8b-") {
				pods[r.pod]++
			}
		}
		total := 0
		for _, n := range pods {
			total += n
		}
		if len(pods) < 2 || pods[slow] == 0 {
			t.Fatalf("%s: requests per pod %v", p, pods)
		}
		share[p] = float64(pods[slow]) / (float64(total) / float64(len(pods)))
		t.Logf("%s: the slow pod got %.2f of a pod's mean share (%v)", p, share[p], pods)
	}
	for _, p := range []RouterPolicy{RouteRoundRobin, RouteRandom} {
		if share[p] < 0.85 {
			t.Errorf("%s: the slow pod got %.2f of a pod's mean share, want about 1", p, share[p])
		}
	}
	if share[RouteLeastLoaded] > 0.9*share[RouteRoundRobin] {
		t.Errorf("least-loaded: the slow pod got %.2f of a pod's mean share, round-robin %.2f: not steered away", share[RouteLeastLoaded], share[RouteRoundRobin])
	}
	cfg := DefaultConfig()
	cfg.Router = "sticky"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "router") {
		t.Errorf("router %q: %v", cfg.Router, err)
	}
}
