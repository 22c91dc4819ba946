package causal

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal/causaltest"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
	"github.com/tailcause/tailcause/schemas"
)

type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) { w.t.Log(strings.TrimSpace(string(b))); return len(b), nil }

var synthStart = causaltest.Start

// analyzeScenario inserts the scenario's rows into a fresh database and
// analyzes req.
func analyzeScenario(t *testing.T, s synthScenario, req Request) *Analysis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := synthAnalyzer(ctx, t, s)
	t0 := time.Now()
	an, err := a.Analyze(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(an.Incident, "", "  ")
	t.Logf("analysis in %v (%d queries, %v in ClickHouse), baseline %s, breach %+v, tail > %.0f ms\n%s",
		time.Since(t0), an.Queries, an.QueryTime, an.BaselineSource, an.Breach, an.TailThresholdMS, b)
	for _, c := range an.Candidates {
		e := c.Estimate
		t.Logf("candidate %-28s %-22s culprit=%-5v AF=%.3f %v lpm=%.4f±%.4f log=%.3f±%.3f effect=%.0f cf=%.0f p=%d skipped=%q",
			c.Cause, c.Node, c.Culprit, e.Attributed.Value, e.Attributed.CI, e.LPM.Beta, e.LPM.SE, e.Log.Beta, e.Log.SE, e.EffectMS, e.CounterfactualMS, c.Regressors, c.Skipped)
	}
	if err := an.Incident.Validate(); err != nil {
		t.Errorf("invalid document: %v", err)
	}
	return an
}

// synthAnalyzer inserts the scenario's rows into a fresh database and
// returns an Analyzer reading it (debug logs with -v).
func synthAnalyzer(ctx context.Context, t *testing.T, s synthScenario) *Analyzer {
	t.Helper()
	st := chstoretest.Fresh(t)
	if s.Start.IsZero() {
		s.Start = synthStart
	}
	if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Version = "test"
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a, err := NewAnalyzer(StoreDB(st), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func window(from, to time.Duration) Interval {
	return Interval{Start: synthStart.Add(from), End: synthStart.Add(to)}
}

var llama = map[string]string{"model": "llama-3-8b"}

// culprit returns the culprit of cause c, or nil.
func culprit(in Incident, c Cause) *Culprit {
	for i := range in.Culprits {
		if in.Culprits[i].Cause == c {
			return &in.Culprits[i]
		}
	}
	return nil
}

// checkTop asserts the rank-1 culprit and the sanity of its numbers: a
// positive effect with an interval around it, a sizeable attributable
// fraction, a counterfactual quantile close to the baseline's (a single
// strong cause explains the breach), evidence and exemplars.
func checkTop(t *testing.T, an *Analysis, cause Cause, entity Entity, minAF float64) {
	t.Helper()
	in := an.Incident
	if in.Status != StatusFiring || len(in.Culprits) == 0 {
		t.Fatalf("status %s with %d culprits, want firing with %s", in.Status, len(in.Culprits), cause)
	}
	top := in.Culprits[0]
	if top.Cause != cause || top.Entity != entity {
		t.Fatalf("top culprit %s %+v, want %s %+v", top.Cause, top.Entity, cause, entity)
	}
	if !(top.EffectMS > 0 && top.CI95MS[0] > 0 && top.CI95MS[0] <= top.EffectMS && top.EffectMS <= top.CI95MS[1]) {
		t.Errorf("effect %v ms, interval %v", top.EffectMS, top.CI95MS)
	}
	if top.AttributableFraction < minAF {
		t.Errorf("attributable fraction %v < %v", top.AttributableFraction, minAF)
	}
	if r := top.CounterfactualP99MS / in.BaselineP99MS; r < 0.85 || r > 1.15 {
		t.Errorf("counterfactual P99 %v ms vs baseline %v ms (ratio %.2f): removing the only cause should restore the baseline", top.CounterfactualP99MS, in.BaselineP99MS, r)
	}
	if !(top.CounterfactualP99MS < in.ObservedP99MS) {
		t.Errorf("counterfactual %v not below observed %v", top.CounterfactualP99MS, in.ObservedP99MS)
	}
	if len(top.Evidence) < 2 || len(top.ExemplarTraceIDs) == 0 {
		t.Errorf("evidence %q, exemplars %q", top.Evidence, top.ExemplarTraceIDs)
	}
	if in.TailRequests <= 0 || in.Requests <= in.TailRequests || in.ObservedP99MS <= in.BaselineP99MS {
		t.Errorf("requests %d, tail %d, P99 %v vs baseline %v", in.Requests, in.TailRequests, in.ObservedP99MS, in.BaselineP99MS)
	}
}

func engineEntity(h, g int) Entity {
	return Entity{Host: hostName(h), Engine: fmt.Sprint(g), Pod: podName(h, g), Model: "llama-3-8b", GPU: gpuName(h, g)}
}

// (a) A KV-cache fault on one engine, judged against an SLO threshold.
func TestAnalyzeKVFault(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 1, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "kv", Host: 1, GPU: 1}}},
		Request{SLO: SLO{Scope: llama, ThresholdMS: 18000}, Window: window(30*time.Minute, time.Hour)})
	if an.BaselineSource != BaselinePreceding || !an.Breach.Breached || an.Breach.Reasons[0] != "slo" {
		t.Errorf("baseline %s, breach %+v", an.BaselineSource, an.Breach)
	}
	checkTop(t, an, schemas.CauseKVPreemption, engineEntity(1, 1), 0.5)
	top := an.Incident.Culprits[0]
	if top.Health > 0.1 || !slices.Contains(top.AdjustedFor, "prompt_tokens") || !slices.Contains(top.AdjustedFor, "engine") {
		t.Errorf("health %v, adjusted for %v", top.Health, top.AdjustedFor)
	}
	if c := culprit(an.Incident, schemas.CauseEntityDegraded); c != nil {
		t.Errorf("entity.degraded reported although the KV mechanism explains the engine: %+v", c)
	}
}

// (b) The decoy: prompts got longer, KV usage rose with them, no KV fault.
func TestAnalyzeLongPromptDecoy(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 2, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "long_prompts"}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	checkTop(t, an, schemas.CauseLongPrompts, Entity{Model: "llama-3-8b"}, 0.5)
	for _, c := range an.Candidates {
		if c.Cause == schemas.CauseKVPreemption {
			if c.Skipped != "" || c.Culprit || c.Estimate.Attributed.Value > 0.05 {
				t.Errorf("kv decoy: skipped %q, culprit %v, AF %v", c.Skipped, c.Culprit, c.Estimate.Attributed.Value)
			}
			// Unadjusted, KV exposure looks like the cause.
			if ev := c.Estimate.LPM.Beta; ev > 0.02 {
				t.Errorf("kv decoy: adjusted tail effect %v", ev)
			}
		}
	}
}

// (c) A thermal throttle on one GPU while PCIe traffic of another GPU
// rises tenfold without effect.
func TestAnalyzeThermal(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 3, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "thermal", Host: 2, GPU: 0}, {Kind: "pcie_harmless", Host: 0, GPU: 1}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	checkTop(t, an, schemas.CauseThermalThrottle, engineEntity(2, 0), 0.4)
	for _, c := range []Cause{schemas.CausePCIeContention, schemas.CauseEntityDegraded} {
		if cu := culprit(an.Incident, c); cu != nil {
			t.Errorf("%s reported: %+v", c, cu)
		}
	}
}

// A cause spread over two GPUs of different hosts gets a culprit on each
// (splitCause). Each split used to copy its parent's count of the splits
// made so far, and only the first one, whose copy said none, could be a
// culprit: the second throttled GPU went unnamed.
func TestAnalyzeThermalOnTwoGPUs(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 3, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "thermal", Host: 1, GPU: 0}, {Kind: "thermal", Host: 3, GPU: 1}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	var on []Entity
	for _, c := range an.Incident.Culprits {
		if c.Cause == schemas.CauseThermalThrottle {
			on = append(on, c.Entity)
		}
	}
	if len(on) != 2 || !slices.Contains(on, engineEntity(1, 0)) || !slices.Contains(on, engineEntity(3, 1)) {
		t.Fatalf("thermal culprits on %+v, want one on each throttled GPU (%+v, %+v)", on, engineEntity(1, 0), engineEntity(3, 1))
	}
}

// A KV fault on half of the scope's engines is the scope's: a setting of
// the model that bites where the cache is smallest, not four engine
// faults (fresh tuning seed 6394: a model's KV cache cut on all five
// pods collapsed three of them, and the culprit was named on one).
func TestAnalyzeKVOnHalfTheEngines(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 4, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "kv", Host: 0, GPU: 0}, {Kind: "kv", Host: 1, GPU: 1}, {Kind: "kv", Host: 2, GPU: 0}, {Kind: "kv", Host: 3, GPU: 1}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	in := an.Incident
	if len(in.Culprits) == 0 || in.Culprits[0].Cause != schemas.CauseKVPreemption || in.Culprits[0].Entity != (Entity{Model: "llama-3-8b"}) {
		t.Fatalf("culprits %+v, want %s on the model first", in.Culprits, schemas.CauseKVPreemption)
	}
	for _, c := range in.Culprits[1:] {
		if c.Cause == schemas.CauseKVPreemption {
			t.Errorf("a second KV culprit %+v", c.Entity)
		}
	}
}

// (d) No fault: no incident, with and without an SLO threshold (and none
// from the scheduled mode: causal/incident's TestLifecycleNoFault).
func TestAnalyzeNoFault(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	if _, err := insertSynth(ctx, st.Conn(), synthScenario{Seed: 4, Start: synthStart, Duration: time.Hour}, 100_000); err != nil {
		t.Fatal(err)
	}
	a, err := NewAnalyzer(StoreDB(st), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, thr := range []float64{0, 18000} {
		an, err := a.Analyze(ctx, Request{SLO: SLO{Scope: llama, ThresholdMS: thr}, Window: window(30*time.Minute, time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		in := an.Incident
		if in.Status != StatusOK || len(in.Culprits) != 0 || in.IncidentID != "" || in.Validate() != nil {
			t.Errorf("threshold %v: status %s, %d culprits, id %q", thr, in.Status, len(in.Culprits), in.IncidentID)
		}
		if in.ObservedP99MS <= 0 || in.BaselineP99MS <= 0 || in.Requests < 20000 {
			t.Errorf("threshold %v: P99 %v baseline %v requests %d", thr, in.ObservedP99MS, in.BaselineP99MS, in.Requests)
		}
	}
}

// (e) No data before --from: the baseline is the healthy start of the
// window, found by change points of the P99 series.
func TestAnalyzeChangePoint(t *testing.T) {
	faultAt := 25 * time.Minute
	an := analyzeScenario(t, synthScenario{Seed: 6, Duration: time.Hour, FaultFrom: faultAt,
		Faults: []synthFault{{Kind: "kv", Host: 1, GPU: 1}}},
		Request{SLO: SLO{Scope: llama}, Window: window(0, time.Hour)})
	if an.BaselineSource != BaselineChangePoint {
		t.Fatalf("baseline source %s", an.BaselineSource)
	}
	b := an.Incident.Baseline
	if !b.Start.Equal(synthStart) || b.End.Sub(synthStart.Add(faultAt)).Abs() > 3*time.Minute || !an.Incident.Window.Start.Equal(b.End) {
		t.Errorf("baseline %s, window %s; the fault began at %s", fmtInterval(b), fmtInterval(an.Incident.Window), synthStart.Add(faultAt).Format(time.RFC3339))
	}
	checkTop(t, an, schemas.CauseKVPreemption, engineEntity(1, 1), 0.5)
}

// An engine slows down with no metric moving: entity.degraded.
func TestAnalyzeDegraded(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 5, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "degraded", Host: 3, GPU: 1}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	checkTop(t, an, schemas.CauseEntityDegraded, engineEntity(3, 1), 0.5)
	// entity_health: the slow engine, its GPU and its host are the least
	// healthy of their kinds; every other host looks like its peers.
	eh := an.Incident.EntityHealth
	low := map[string]Entity{}
	for _, h := range eh {
		if _, ok := low[h.Kind]; !ok {
			low[h.Kind] = h.Entity
		}
		if h.Kind == "host" && h.Entity.Host != hostName(3) && h.Health < 0.5 {
			t.Errorf("healthy host %s scored %v", h.Entity.Host, h.Health)
		}
	}
	e := engineEntity(3, 1)
	if low["engine"] != (Entity{Host: e.Host, Engine: e.Engine, Pod: e.Pod, Model: e.Model}) || low["gpu"] != (Entity{Host: e.Host, GPU: e.GPU}) || low["host"] != (Entity{Host: e.Host}) {
		t.Errorf("least healthy per kind %+v; entity_health %+v", low, eh)
	}
	if len(eh) == 0 || eh[0].Health > 0.1 {
		t.Errorf("entity_health %+v", eh)
	}
}

// A slow engine whose GPU's PCIe link is idle (a few MB/s) and moves a
// little with the slowdown: its traffic is far above its baseline's P95
// in relative terms and far below any level at which a link contends
// (the pcie node's floor, 1 GB/s). The engine is entity.degraded and the
// link no candidate; without the floor gpu.pcie_contention was named on
// the GPU first (tuning seed 5640: a noise-level PCIe rise outranked the
// pod's prefill interference).
func TestAnalyzeDegradedIdlePCIeLink(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 5, Duration: time.Hour, FaultFrom: 30 * time.Minute, PCIeLevel: 6e6,
		Faults: []synthFault{{Kind: "degraded", Host: 3, GPU: 1}, {Kind: "pcie_harmless", Host: 3, GPU: 1, Factor: 1.6}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	checkTop(t, an, schemas.CauseEntityDegraded, engineEntity(3, 1), 0.5)
	for _, c := range an.Candidates {
		if c.Cause == schemas.CausePCIeContention && !strings.Contains(c.Skipped, "floor") {
			t.Errorf("gpu.pcie_contention examined over an idle link: %+v", c)
		}
	}
}

// A whole slow host (both of its engines slowed alike): one
// entity.degraded culprit on the host, not one per engine, and no engine
// of it examined alone. (TestAnalyzeDegraded: one slow engine on a host
// stays an engine culprit.)
func TestAnalyzeDegradedHost(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 11, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "degraded", Host: 2, GPU: 0}, {Kind: "degraded", Host: 2, GPU: 1}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	checkTop(t, an, schemas.CauseEntityDegraded, Entity{Host: hostName(2), Model: "llama-3-8b"}, 0.5)
	top := an.Incident.Culprits[0]
	if ev := strings.Join(top.Evidence, "\n"); !strings.Contains(ev, "its 2 engines share the excess tail") || !strings.Contains(ev, "health of "+hostName(2)) {
		t.Errorf("evidence %q", top.Evidence)
	}
	for _, c := range an.Candidates {
		if c.Cause == schemas.CauseEntityDegraded && c.Entity.Host == hostName(2) && c.Entity.Pod != "" {
			t.Errorf("an engine of the slow host examined alone: %+v", c.Entity)
		}
	}
	for _, c := range an.Incident.Culprits[1:] {
		if c.Cause == schemas.CauseEntityDegraded {
			t.Errorf("a second entity.degraded culprit %+v", c.Entity)
		}
	}
}

// A thermal throttle on one GPU of a tensor-parallel engine: the request
// rows name no GPU (they ran on all four), the engine's GPU samples show
// which one throttles, and the culprit names it.
func TestAnalyzeThrottleInTensorParallelEngine(t *testing.T) {
	for _, defaults := range []bool{false, true} {
		t.Run(fmt.Sprintf("dcgm-default-fields=%v", defaults), func(t *testing.T) {
			testThrottleInTensorParallelEngine(t, defaults)
		})
	}
}

// testThrottleInTensorParallelEngine: with dcgmDefaults the samples are
// the GPUs' temperatures (the thermal node's fallback), not their reasons.
func testThrottleInTensorParallelEngine(t *testing.T, dcgmDefaults bool) {
	s := synthScenario{Seed: 10, Start: synthStart, Duration: time.Hour, FaultFrom: 30 * time.Minute, TP: true, TPHost: 2,
		Faults: []synthFault{{Kind: "thermal", Host: 2, GPU: 0}}, DCGMDefaultFields: dcgmDefaults}
	an := analyzeWithSamples(t, s)
	in := an.Incident
	want := engineEntity(2, 0) // the GPU, and the engine it belongs to
	if len(in.Culprits) == 0 || in.Culprits[0].Cause != schemas.CauseThermalThrottle || in.Culprits[0].Entity != want {
		t.Fatalf("culprits %+v, want %s on %+v first", in.Culprits, schemas.CauseThermalThrottle, want)
	}
	top := in.Culprits[0]
	if ev := strings.Join(top.Evidence, "\n"); !strings.Contains(ev, "GPU samples of engine node-2/vllm-2-0/0 (4 GPUs") || !strings.Contains(ev, "its 3 peers at most 0") {
		t.Errorf("evidence %q", top.Evidence)
	}
	if top.Health > 0.1 {
		t.Errorf("health %v: the engine's health should be carried", top.Health)
	}
}

// The GPU of a tensor-parallel engine in an entity breach's analysis is
// told over the breach's stretch: a throttle on one GPU from minute 25 to
// 45, the engine's breach found in 40–45, asked over 40–60 against 20–40.
// Over the window the GPU throttled less often than over the baseline (a
// quarter against three quarters of the time), and the culprit stayed on
// the scope, or named the wrong GPU of the engine (tuning seed 5098); over
// the stretch it throttled throughout.
func TestThrottleInTensorParallelEngineFocusStretch(t *testing.T) {
	s := synthScenario{Seed: 10, Start: synthStart, Duration: time.Hour, FaultFrom: 25 * time.Minute, FaultTo: 45 * time.Minute, TP: true, TPHost: 2,
		Faults: []synthFault{{Kind: "thermal", Host: 2, GPU: 0}}}
	want := engineEntity(2, 0)
	stretch := window(40*time.Minute, 45*time.Minute)
	base := window(20*time.Minute, 40*time.Minute)
	eng := want
	eng.GPU = ""
	an := analyzeWithSamplesReq(t, s, Request{SLO: SLO{Scope: llama}, Window: window(40*time.Minute, time.Hour), Baseline: &base,
		Focus: &Where{Level: LevelEngine, Entity: eng, Stretch: &stretch}})
	in := an.Incident
	i := slices.IndexFunc(in.Culprits, func(c Culprit) bool { return c.Cause == schemas.CauseThermalThrottle })
	if i < 0 || in.Culprits[i].Entity.GPU != want.GPU {
		t.Fatalf("culprits %+v, want %s on %s", in.Culprits, schemas.CauseThermalThrottle, want.GPU)
	}
}

// A throttle on every GPU of a tensor-parallel engine, on a host whose
// other GPUs serve nothing (a host's cooling or power cap shows only where
// GPUs work): the host is the culprit's, though most of its GPUs stay
// quiet.
func TestAnalyzeHostWideThrottleWithIdleGPUs(t *testing.T) {
	for _, defaults := range []bool{false, true} {
		t.Run(fmt.Sprintf("dcgm-default-fields=%v", defaults), func(t *testing.T) {
			testHostWideThrottleWithIdleGPUs(t, defaults)
		})
	}
}

func testHostWideThrottleWithIdleGPUs(t *testing.T, dcgmDefaults bool) {
	s := synthScenario{Seed: 10, Start: synthStart, Duration: time.Hour, FaultFrom: 30 * time.Minute, TP: true, TPHost: 2,
		TPAllGPUs: true, IdleGPUs: 5, Faults: []synthFault{{Kind: "thermal", Host: 2, GPU: 0}}, DCGMDefaultFields: dcgmDefaults}
	an := analyzeWithSamples(t, s)
	in := an.Incident
	want := Entity{Host: hostName(2), Model: "llama-3-8b"}
	if len(in.Culprits) == 0 || in.Culprits[0].Cause != schemas.CauseThermalThrottle || in.Culprits[0].Entity != want {
		t.Fatalf("culprits %+v, want %s on %+v first", in.Culprits, schemas.CauseThermalThrottle, want)
	}
	if ev := strings.Join(in.Culprits[0].Evidence, "\n"); !strings.Contains(ev, "rose on 4 of the 4 GPUs of host node-2") {
		t.Errorf("evidence %q", in.Culprits[0].Evidence)
	}
}

// evicts: on an engine whose KV fault fills its cache, the prefix misses
// rose only where the cache was full (evictions: the KV culprit's); on an
// engine whose prefix cache stopped hitting, they rose where it had room
// too (the prefix cache's own). An engine that lost most of a roomy cache
// (kv_lost) misses where it still has room as well, but its KV usage rose
// far past what the lost sharing could fill: evictions again.
func TestEvictsTellsEvictionsFromPrefixFault(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		lowKV bool
		want  bool
	}{{"kv", false, true}, {"prefix", false, false}, {"kv_lost", true, true}, {"prefix", true, false}} {
		t.Run(fmt.Sprintf("%s/lowKV=%v", tc.kind, tc.lowKV), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			s := synthScenario{Seed: 21, Duration: time.Hour, FaultFrom: 30 * time.Minute, PrefixHits: true, LowKV: tc.lowKV,
				Faults: []synthFault{{Kind: tc.kind, Host: 1, GPU: 1}}}
			a := synthAnalyzer(ctx, t, s)
			base := window(0, 30*time.Minute)
			r, err := a.newRun(ctx, Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour), Baseline: &base})
			if err != nil {
				t.Fatal(err)
			}
			fr, err := r.resolveBaseline()
			if err != nil {
				t.Fatal(err)
			}
			r.win, r.base, r.baseSource = fr.win, fr.base, fr.source
			kv, _ := a.dag.Node("kv_usage")
			pm, _ := a.dag.Node("prefix_miss")
			r.causes = []*causeRun{
				{node: kv, exposed: "(" + kv.Exposed + ")", cand: Candidate{Cause: schemas.CauseKVPreemption}},
				{node: pm, cand: Candidate{Cause: schemas.CausePrefixMiss}},
			}
			e := engineEntity(1, 1)
			got := r.evicts(Culprit{Cause: schemas.CauseKVPreemption, Entity: e}, Culprit{Cause: schemas.CausePrefixMiss, Entity: e})
			if got != tc.want {
				t.Errorf("evicts = %v, want %v (notes %q)", got, tc.want, r.notes)
			}
			if !slices.ContainsFunc(r.notes, func(n string) bool { return strings.HasPrefix(n, "evictions: ") }) {
				t.Errorf("no evictions note in %q", r.notes)
			}
		})
	}
}

// analyzeWithSamples analyses the second half hour of s over llama, with
// the tensor-parallel engine's GPU samples (insertGPUSamples) beside it.
func analyzeWithSamples(t *testing.T, s synthScenario) *Analysis {
	t.Helper()
	return analyzeWithSamplesReq(t, s, Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
}

// analyzeWithSamplesReq is analyzeWithSamples asking req.
func analyzeWithSamplesReq(t *testing.T, s synthScenario, req Request) *Analysis {
	t.Helper()
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
		t.Fatal(err)
	}
	if err := insertGPUSamples(ctx, st.Conn(), s); err != nil {
		t.Fatal(err)
	}
	a, err := NewAnalyzer(StoreDB(st), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	an, err := a.Analyze(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return an
}

// queueCandidate is the queue.saturation culprit's candidate, or fails.
func queueCandidate(t *testing.T, an *Analysis) Candidate {
	t.Helper()
	for _, c := range an.Candidates {
		if c.Cause == schemas.CauseQueueSaturation && c.Culprit {
			return c
		}
	}
	t.Fatalf("queue.saturation is not a culprit: %+v", an.Incident.Culprits)
	return Candidate{}
}

// A surge: 40% of all arrivals forced onto one engine fill its batch and
// its queue. More work arrived: queue.saturation on that engine, first.
func TestAnalyzeQueueSurge(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 8, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "surge", Host: 2, GPU: 1, Factor: 0.4}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	top := an.Incident.Culprits
	if len(top) == 0 || top[0].Cause != schemas.CauseQueueSaturation || top[0].Entity != engineEntity(2, 1) {
		t.Fatalf("culprits %+v, want queue.saturation on %+v first", top, engineEntity(2, 1))
	}
	q := queueCandidate(t, an)
	if q.Symptom || !strings.Contains(strings.Join(q.Evidence, "\n"), "more work arrived") {
		t.Errorf("symptom %v, evidence %q", q.Symptom, q.Evidence)
	}
}

// A surge that began late in the window: half of all arrivals forced onto
// one engine of eight for its last 4 minutes, ×1.47 over the whole window,
// ×4.5 while the queue was long. It is judged over the latter: more work
// arrived.
func TestAnalyzeQueueSurgeLateInWindow(t *testing.T) {
	base := window(0, 30*time.Minute)
	an := analyzeScenario(t, synthScenario{Seed: 8, Duration: time.Hour, FaultFrom: 56 * time.Minute,
		Faults: []synthFault{{Kind: "surge", Host: 2, GPU: 1, Factor: 0.5}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour), Baseline: &base})
	q := queueCandidate(t, an)
	ev := strings.Join(q.Evidence, "\n")
	if q.Symptom || !strings.Contains(ev, "while its queue was long") || !strings.Contains(ev, "more work arrived") {
		t.Errorf("symptom %v, evidence %q", q.Symptom, q.Evidence)
	}
}

// The same queue built by a slow engine with unchanged arrivals is a
// symptom: the slowdown ranks first, the queue after it.
func TestAnalyzeQueueFromSlowService(t *testing.T) {
	an := analyzeScenario(t, synthScenario{Seed: 9, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "slow_queue", Host: 2, GPU: 1, Factor: 2.2}}},
		Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	checkTop(t, an, schemas.CauseEntityDegraded, engineEntity(2, 1), 0.3)
	q := queueCandidate(t, an)
	if !q.Symptom || !strings.Contains(strings.Join(q.Evidence, "\n"), "served slower") {
		t.Errorf("symptom %v, evidence %q", q.Symptom, q.Evidence)
	}
}

// Other signals run end to end (causes not upstream of the outcome are
// skipped with a reason) and give valid documents.
func TestAnalyzeSignals(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	s := synthScenario{Seed: 7, Start: synthStart, Duration: time.Hour, FaultFrom: 30 * time.Minute,
		Faults: []synthFault{{Kind: "thermal", Host: 0, GPU: 0}}}
	if _, err := insertSynth(ctx, st.Conn(), s, 100_000); err != nil {
		t.Fatal(err)
	}
	a, err := NewAnalyzer(StoreDB(st), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []string{"ttft", "tpot"} {
		an, err := a.Analyze(ctx, Request{SLO: SLO{Signal: sig, Scope: llama}, Window: window(30*time.Minute, time.Hour)})
		if err != nil {
			t.Fatalf("%s: %v", sig, err)
		}
		if err := an.Incident.Validate(); err != nil {
			t.Errorf("%s: %v", sig, err)
		}
		t.Logf("%s: %s P99 %.0f (baseline %.0f) top %q", sig, an.Incident.Status, an.Incident.ObservedP99MS, an.Incident.BaselineP99MS, TopCulprit(an.Incident))
		switch sig {
		case "tpot": // the throttle slows decoding: it must be found
			if c := an.Incident.Culprits; len(c) == 0 || c[0].Cause != schemas.CauseThermalThrottle || c[0].Entity.GPU != gpuName(0, 0) {
				t.Errorf("tpot: culprits %+v", c)
			}
		case "ttft": // the synthetic TTFT does not depend on the clock
			if an.Incident.Status != StatusOK {
				t.Errorf("ttft: %s with %+v", an.Incident.Status, an.Incident.Culprits)
			}
		}
	}
	if _, err := a.Analyze(ctx, Request{SLO: SLO{Signal: "nope"}, Window: window(0, time.Hour)}); err == nil {
		t.Error("unknown signal accepted")
	}
	if _, err := a.Analyze(ctx, Request{SLO: SLO{Scope: map[string]string{"x; DROP": "1"}}, Window: window(0, time.Hour)}); err == nil {
		t.Error("unknown scope key accepted")
	}
}

// A fault over a fifth of a window that has a healthy preceding baseline:
// the whole window's P99, diluted by the healthy minutes around the fault,
// stays within the baseline rule, but the stretch where the quantile series
// changed breaches it, and the analysis narrows the window to that stretch
// and names the cause (a tuning run: a model-wide prefix-cache loss over 4
// of the last 15 minutes was "no breach" when asked with the earlier half
// hour as history).
func TestAnalyzeBreachInsideWindow(t *testing.T) {
	s := synthScenario{Seed: 41, Duration: time.Hour, FaultFrom: 44 * time.Minute, FaultTo: 50 * time.Minute,
		Faults: []synthFault{{Kind: "long_prompts", Factor: 0.1}}}
	an := analyzeScenario(t, s, Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)})
	if an.BaselineSource != BaselinePreceding || an.Incident.Status != StatusFiring {
		t.Fatalf("baseline %s, status %s: want a firing analysis against the preceding baseline", an.BaselineSource, an.Incident.Status)
	}
	if !slices.ContainsFunc(an.Incident.Notes, func(n string) bool { return strings.Contains(n, "window narrowed") }) {
		t.Fatalf("the whole window breached by itself (notes %q): the fault is too strong to test the stretch", an.Incident.Notes)
	}
	if w := an.Incident.Window; w.Start.Before(synthStart.Add(40*time.Minute)) || w.End.After(synthStart.Add(55*time.Minute)) {
		t.Errorf("window %s, want about the fault's 44–50 min", fmtInterval(w))
	}
	if top := an.Incident.Culprits[0]; top.Cause != schemas.CauseLongPrompts || !scopeWide(top.Entity) {
		t.Errorf("top culprit %s %+v, want workload.long_prompts on the model", top.Cause, top.Entity)
	}
}

// The same fleet asked the same question at another time of day: data
// and window moved by 17.3 s (off every bucket grid) narrow to the same
// stretch, relative to the window, with the same culprits. The quantile
// series counted its buckets from the epoch, so a window asked at any
// time ("the last 30 minutes") began and ended in partial buckets and
// its change points moved with the clock.
func TestAnalyzeWindowOffGrid(t *testing.T) {
	s := synthScenario{Seed: 41, Duration: time.Hour, FaultFrom: 44 * time.Minute, FaultTo: 50 * time.Minute,
		Faults: []synthFault{{Kind: "long_prompts", Factor: 0.1}}}
	req := Request{SLO: SLO{Scope: llama}, Window: window(30*time.Minute, time.Hour)}
	on := analyzeScenario(t, s, req)
	const off = 17300 * time.Millisecond
	s.Start = synthStart.Add(off)
	req.Window = Interval{Start: req.Window.Start.Add(off), End: req.Window.End.Add(off)}
	moved := analyzeScenario(t, s, req)
	a, b := on.Incident, moved.Incident
	if a.Status != StatusFiring || b.Status != a.Status {
		t.Fatalf("status %s on the grid, %s off it; want both firing", a.Status, b.Status)
	}
	if !b.Window.Start.Equal(a.Window.Start.Add(off)) || !b.Window.End.Equal(a.Window.End.Add(off)) {
		t.Errorf("window %s off the grid, want %s moved by %v", fmtInterval(b.Window), fmtInterval(a.Window), off)
	}
	if len(b.Culprits) != len(a.Culprits) {
		t.Fatalf("%d culprits off the grid, %d on it", len(b.Culprits), len(a.Culprits))
	}
	for i := range a.Culprits {
		if a.Culprits[i].Cause != b.Culprits[i].Cause || a.Culprits[i].Entity != b.Culprits[i].Entity {
			t.Errorf("culprit %d: %s %+v off the grid, %s %+v on it", i+1, b.Culprits[i].Cause, b.Culprits[i].Entity, a.Culprits[i].Cause, a.Culprits[i].Entity)
		}
	}
}

// A breach on from the window's start (no earlier data) that recovered
// inside it: the window narrows to the breach and the time after the
// recovery is the baseline. A "recovery" in the window's last minute is
// a trough, not the healthy yardstick of everything before it: shorter
// than MinBreachStretch after it, no breach is declared from it.
func TestAnalyzeRecoveryInWindow(t *testing.T) {
	s := synthScenario{Seed: 43, Duration: 30 * time.Minute, FaultTo: 18 * time.Minute,
		Faults: []synthFault{{Kind: "long_prompts", Factor: 0.5}}}
	req := Request{SLO: SLO{Scope: llama}, Window: window(0, 30*time.Minute)}
	an := analyzeScenario(t, s, req)
	if an.BaselineSource != BaselineChangePoint || an.Incident.Status != StatusFiring {
		t.Fatalf("baseline %s, status %s: want a firing analysis with the recovered stretch as its baseline", an.BaselineSource, an.Incident.Status)
	}
	if w := an.Incident.Window; !w.Start.Equal(synthStart) || w.End.Before(synthStart.Add(15*time.Minute)) || w.End.After(synthStart.Add(21*time.Minute)) {
		t.Errorf("window %s, want from the start to about the fault's end (18 min)", fmtInterval(w))
	}
	if top := an.Incident.Culprits[0]; top.Cause != schemas.CauseLongPrompts {
		t.Errorf("top culprit %s, want workload.long_prompts", top.Cause)
	}
	// A ten-minute window (15 s buckets): the fault until its ninth minute.
	s.Duration, s.FaultTo = 10*time.Minute, 9*time.Minute
	an = analyzeScenario(t, s, Request{SLO: SLO{Scope: llama}, Window: window(0, 10*time.Minute)})
	if an.Incident.Status != StatusOK || slices.ContainsFunc(an.Incident.Notes, func(n string) bool { return strings.Contains(n, "recovered at") }) {
		t.Errorf("status %s, notes %q: a trough in the last minute taken for a recovery", an.Incident.Status, an.Incident.Notes)
	}
}
