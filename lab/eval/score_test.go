package eval

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/lab/faultlab"
	"github.com/tailcause/tailcause/lab/faultlab/sink"
)

// scoreTruth is the ground truth of a real (one-minute) lab run on a small
// fleet with one fault of every level:
//
//	node-1 (H100 ×4): llama-3.1-8b pods 0, 1, 2 on GPUs 0, 1, 2 (GPU 3 idle)
//	node-2 (H200 ×4): qwen2.5-32b pod 0 (TP2) on GPUs 0–1, mistral-7b pods 0, 1 on GPUs 2, 3
func scoreTruth(t *testing.T) *faultlab.Truth {
	t.Helper()
	w := []faultlab.StreamSpec{{Trace: "azure-conv", Share: 1}}
	fl := faultlab.FleetSpec{
		Hosts: []faultlab.HostSpec{{Name: "node-1", GPU: "H100", GPUs: 4}, {Name: "node-2", GPU: "H200", GPUs: 4}},
		Models: []faultlab.ModelSpec{
			{Name: "llama-3.1-8b", Hosts: []string{"node-1"}, Engines: 3, TP: 1, Rate: 3, Workload: w},
			{Name: "qwen2.5-32b", Hosts: []string{"node-2"}, Engines: 1, TP: 2, Rate: 1, Workload: w},
			{Name: "mistral-7b", Hosts: []string{"node-2"}, Engines: 2, TP: 1, Rate: 2, Workload: w},
		},
	}
	f := func(cause string, t faultlab.Target) faultlab.FaultSpec {
		return faultlab.FaultSpec{Cause: cause, Target: t, Onset: "10s", Duration: "20s", Magnitude: 0.5}
	}
	sc := &faultlab.Scenario{Name: "score-levels", Fleet: &fl, Faults: []faultlab.FaultSpec{
		f("workload.long_prompts", faultlab.Target{Model: "llama-3.1-8b"}),     // 0 model
		f("kv_cache.preemption", faultlab.Target{Pod: "llama-3-1-8b-1"}),       // 1 engine, one GPU
		f("gpu.thermal_throttle", faultlab.Target{GPU: "node-2/1"}),            // 2 GPU of a TP2 engine
		f("entity.degraded", faultlab.Target{Host: "node-1"}),                  // 3 host, one model
		f("gpu.power_cap", faultlab.Target{GPU: "node-1/0"}),                   // 4 GPU of a one-GPU pod
		f("prefix_cache.miss", faultlab.Target{Pod: "qwen2-5-32b-0"}),          // 5 engine, TP2
		f("gpu.memory_bandwidth", faultlab.Target{Host: "node-2"}),             // 6 host, two models
		f("kv_cache.preemption", faultlab.Target{Model: "qwen2.5-32b"}),        // 7 model of one engine
		f("queue.saturation", faultlab.Target{Model: "mistral-7b"}),            // 8 model
		f("engine.prefill_interference", faultlab.Target{Pod: "mistral-7b-1"}), // 9 engine
	}}
	cfg := faultlab.DefaultConfig()
	cfg.Fleet, cfg.Scenario, cfg.Duration, cfg.Warmup = fl, sc, time.Minute, -1
	tr, err := faultlab.Run(context.Background(), cfg, sink.Discard{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func gpuOf(t *testing.T, tr *faultlab.Truth, host string, idx int) string {
	t.Helper()
	for _, h := range tr.Fleet.Hosts {
		if h.Name == host {
			return h.GPUs[idx].UUID
		}
	}
	t.Fatalf("no GPU %s/%d", host, idx)
	return ""
}

func TestFaultLevel(t *testing.T) {
	tr := scoreTruth(t)
	want := []Level{LevelModel, LevelEngine, LevelGPU, LevelHost, LevelGPU, LevelEngine, LevelHost, LevelModel, LevelModel, LevelEngine}
	for i, f := range tr.Faults {
		if got := FaultLevel(f); got != want[i] {
			t.Errorf("fault %d (%s on %+v): level %s, want %s", i, f.Cause, f.Target, got, want[i])
		}
	}
}

// Every fault is named by a culprit carrying the truth's own entity, and by
// no culprit of another cause.
func TestScorerTruthEntityMatches(t *testing.T) {
	tr := scoreTruth(t)
	s := NewScorer(tr)
	for i, f := range tr.Faults {
		c := culprit(f.Cause, f.Entity)
		if ok, why := s.Match(c, f); !ok {
			t.Errorf("fault %d (%s): its own entity %+v does not match: %s", i, f.Cause, f.Entity, why)
		}
		c.Cause = "gpu.xid_error"
		if ok, _ := s.Match(c, f); ok {
			t.Errorf("fault %d (%s): matched by another cause", i, f.Cause)
		}
	}
}

func culprit(cause string, e faultlab.Entity) causal.Culprit {
	return causal.Culprit{Cause: causal.Cause(cause), Entity: causal.Entity{
		Model: e.Model, Service: e.Service, Host: e.Host, GPU: e.GPU, Engine: e.Engine, Pod: e.Pod,
	}}
}

func TestScorerRules(t *testing.T) {
	tr := scoreTruth(t)
	s := NewScorer(tr)
	n1g0, n1g1 := gpuOf(t, tr, "node-1", 0), gpuOf(t, tr, "node-1", 1)
	n2g0, n2g1 := gpuOf(t, tr, "node-2", 0), gpuOf(t, tr, "node-2", 1)
	type E = causal.Entity
	cases := []struct {
		name  string
		fault int
		e     E
		want  bool
	}{
		// Model level: the model, and nothing narrower than the model.
		{"model: the model", 0, E{Model: "llama-3.1-8b"}, true},
		{"model: model and service", 0, E{Model: "llama-3.1-8b", Service: "llama-3.1-8b"}, true},
		{"model: scope-wide culprit, no entity", 0, E{}, false},
		{"model: another model", 0, E{Model: "mistral-7b"}, false},
		{"model: one pod of a model-wide fault", 0, E{Model: "llama-3.1-8b", Pod: "llama-3-1-8b-1", Host: "node-1"}, false},
		{"model: its host, no model", 0, E{Host: "node-1"}, false},
		{"model: wrong service", 0, E{Model: "llama-3.1-8b", Service: "other"}, false},
		{"model: arrival surge on the model", 8, E{Model: "mistral-7b"}, true},
		{"model: arrival surge, scope-wide", 8, E{}, false},
		{"model: one-engine model, model named", 7, E{Model: "qwen2.5-32b"}, true},
		{"model: one-engine model, its pod and model", 7, E{Model: "qwen2.5-32b", Pod: "qwen2-5-32b-0"}, true},
		{"model: one-engine model, pod without model", 7, E{Pod: "qwen2-5-32b-0"}, false},

		// Engine level: the pod (or the GPU of a one-GPU pod).
		{"engine: the pod", 1, E{Pod: "llama-3-1-8b-1"}, true},
		{"engine: pod, host, model, engine label", 1, E{Pod: "llama-3-1-8b-1", Host: "node-1", Model: "llama-3.1-8b", Engine: "0"}, true},
		{"engine: the one GPU the pod runs on", 1, E{GPU: n1g1}, true},
		{"engine: scope-wide culprit, no entity", 1, E{}, false},
		{"engine: the model only", 1, E{Model: "llama-3.1-8b"}, false},
		{"engine: the host only", 1, E{Host: "node-1"}, false},
		{"engine: the wrong pod", 1, E{Pod: "llama-3-1-8b-2"}, false},
		{"engine: the right pod on the wrong host", 1, E{Pod: "llama-3-1-8b-1", Host: "node-2"}, false},
		{"engine: the wrong engine label", 1, E{Pod: "llama-3-1-8b-1", Engine: "1"}, false},
		{"engine: a TP2 engine's pod", 5, E{Pod: "qwen2-5-32b-0", Host: "node-2"}, true},
		{"engine: one GPU of a TP2 engine", 5, E{GPU: n2g0, Pod: "qwen2-5-32b-0"}, false},
		{"engine: the model of a one-engine model, no pod", 5, E{Model: "qwen2.5-32b"}, false},
		{"engine: prefill interference on the pod", 9, E{Pod: "mistral-7b-1", Model: "mistral-7b"}, true},
		{"engine: prefill interference on the peer pod", 9, E{Pod: "mistral-7b-0", Model: "mistral-7b"}, false},

		// GPU level: the GPU UUID (or the pod when it runs on that GPU alone).
		{"gpu: the GPU of a TP2 engine", 2, E{GPU: n2g1}, true},
		{"gpu: GPU, pod, host and model", 2, E{GPU: n2g1, Pod: "qwen2-5-32b-0", Host: "node-2", Model: "qwen2.5-32b"}, true},
		{"gpu: the TP2 engine's other GPU", 2, E{GPU: n2g0}, false},
		{"gpu: the whole TP2 engine", 2, E{Pod: "qwen2-5-32b-0"}, false},
		{"gpu: the model", 2, E{Model: "qwen2.5-32b"}, false},
		{"gpu: the host", 2, E{Host: "node-2"}, false},
		{"gpu: scope-wide", 2, E{}, false},
		{"gpu: the one-GPU pod on it", 4, E{Pod: "llama-3-1-8b-0", Host: "node-1"}, true},
		{"gpu: its UUID", 4, E{GPU: n1g0}, true},
		{"gpu: a neighbour pod", 4, E{Pod: "llama-3-1-8b-1"}, false},

		// Host level: the host, and nothing narrower than its engines.
		{"host: the host", 3, E{Host: "node-1"}, true},
		{"host: host and the one model it serves", 3, E{Host: "node-1", Model: "llama-3.1-8b"}, true},
		{"host: scope-wide", 3, E{}, false},
		{"host: the model it serves, no host", 3, E{Model: "llama-3.1-8b"}, false},
		{"host: one engine on the host", 3, E{Host: "node-1", Pod: "llama-3-1-8b-0"}, false},
		{"host: one GPU on the host", 3, E{Host: "node-1", GPU: n1g0}, false},
		{"host: another host", 3, E{Host: "node-2"}, false},
		{"host: a host of two models", 6, E{Host: "node-2"}, true},
		{"host: from one of its two models' breaches", 6, E{Host: "node-2", Model: "qwen2.5-32b"}, true},
		{"host: with a model it does not serve", 3, E{Host: "node-1", Model: "qwen2.5-32b"}, false},
		{"host: one pod of a host of two models", 6, E{Host: "node-2", Model: "mistral-7b", Pod: "mistral-7b-0"}, false},
		{"gpu: GPU with its pod's model as scope", 2, E{GPU: n2g1, Model: "qwen2.5-32b"}, true},
	}
	for _, tc := range cases {
		f := tr.Faults[tc.fault]
		ok, why := s.Match(causal.Culprit{Cause: causal.Cause(f.Cause), Entity: tc.e}, f)
		if ok != tc.want {
			t.Errorf("%s: %s on %+v: match %v (%s), want %v", tc.name, f.Cause, tc.e, ok, why, tc.want)
		}
		if !ok && why == "" {
			t.Errorf("%s: no reason given for a miss", tc.name)
		}
	}
}

func TestScoreRanking(t *testing.T) {
	tr := scoreTruth(t)
	s := NewScorer(tr)
	f := tr.Faults[1] // kv_cache.preemption on llama-3-1-8b-1
	faults := []faultlab.TruthFault{f}
	right := causal.Culprit{Cause: "kv_cache.preemption", Entity: causal.Entity{Pod: "llama-3-1-8b-1", Host: "node-1", Model: "llama-3.1-8b"}}
	wrongPod := causal.Culprit{Cause: "kv_cache.preemption", Entity: causal.Entity{Pod: "llama-3-1-8b-2", Host: "node-1", Model: "llama-3.1-8b"}}
	other := causal.Culprit{Cause: "queue.saturation", Entity: causal.Entity{Model: "llama-3.1-8b"}}

	h := s.Score([]causal.Culprit{right, other}, faults)
	if h.Rank != 1 || h.CauseRank != 1 || !h.At(1) || h.Why != "" {
		t.Errorf("right first: %+v", h)
	}
	h = s.Score([]causal.Culprit{other, wrongPod, right}, faults)
	if h.Rank != 3 || h.CauseRank != 2 || h.At(1) || !h.At(3) || h.At(2) || !h.CauseAt(2) || h.CauseAt(1) || h.Why == "" {
		t.Errorf("right third, cause second: %+v", h)
	}
	h = s.Score([]causal.Culprit{other, wrongPod, other, right}, faults)
	if h.At(3) || h.Rank != 4 {
		t.Errorf("right fourth: %+v", h)
	}
	h = s.Score(nil, faults)
	if h.Rank != 0 || h.CauseRank != 0 || h.Why != "no culprit" {
		t.Errorf("empty ranking: %+v", h)
	}
	// A fault-free run: nothing to hit.
	if h := s.Score([]causal.Culprit{right}, nil); h.Rank != 0 || h.CauseRank != 0 {
		t.Errorf("no faults: %+v", h)
	}
}

func TestScoreCauses(t *testing.T) {
	tr := scoreTruth(t)
	faults := []faultlab.TruthFault{tr.Faults[2]} // gpu.thermal_throttle
	h := ScoreCauses([]causal.Cause{"gpu.power_cap", "gpu.thermal_throttle"}, faults)
	if h.CauseRank != 2 || h.Rank != 0 || h.At(3) || !h.CauseAt(2) || h.CauseAt(1) {
		t.Errorf("%+v", h)
	}
	if h := ScoreCauses([]causal.Cause{"gpu.power_cap"}, faults); h.CauseRank != 0 {
		t.Errorf("%+v", h)
	}
}

func TestFlatten(t *testing.T) {
	a := causal.Culprit{Cause: "kv_cache.preemption", Entity: causal.Entity{Pod: "p1"}}
	b := causal.Culprit{Cause: "queue.saturation", Entity: causal.Entity{Model: "m"}}
	c := causal.Culprit{Cause: "kv_cache.preemption", Entity: causal.Entity{Pod: "p2"}}
	an := func(cs ...causal.Culprit) *causal.Analysis {
		return &causal.Analysis{Incident: causal.Incident{Culprits: cs}}
	}
	got := Flatten([]*causal.Analysis{an(a, b), an(b, c, a)})
	if want := []causal.Culprit{a, b, c}; !slices.EqualFunc(got, want, func(x, y causal.Culprit) bool { return x.Cause == y.Cause && x.Entity == y.Entity }) {
		t.Errorf("flatten: %+v, want %+v", got, want)
	}
	if got := Flatten(nil); len(got) != 0 {
		t.Errorf("flatten of no breach: %+v", got)
	}
}

func TestTouches(t *testing.T) {
	tr := scoreTruth(t)
	s := NewScorer(tr)
	f := tr.Faults[1] // kv_cache.preemption on llama-3-1-8b-1
	for _, tc := range []struct {
		e    causal.Entity
		want bool
	}{
		{causal.Entity{Model: "llama-3.1-8b"}, true},
		{causal.Entity{Host: "node-1"}, true},
		{causal.Entity{Pod: "llama-3-1-8b-1"}, true},
		{causal.Entity{Pod: "llama-3-1-8b-0"}, false},
		{causal.Entity{Model: "mistral-7b"}, false},
		{causal.Entity{Host: "node-2"}, false},
	} {
		if got := s.Touches(tc.e, f); got != tc.want {
			t.Errorf("%+v touches %v, want %v", tc.e, got, tc.want)
		}
	}
}

// TestQuestionWindow: the windows never depend on the fault; fault-before
// asks about the healthy-before window's last 40%, which every onset (10–60%
// into it) precedes, and a fault that ended before it (or whose events'
// effects did) is not scored.
func TestQuestionWindow(t *testing.T) {
	start := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	truth := func(onset, end time.Duration) *faultlab.Truth {
		tr := &faultlab.Truth{Start: start, End: start.Add(30 * time.Minute)}
		if end > 0 {
			tr.Faults = []faultlab.TruthFault{{Cause: "gpu.power_cap", Onset: start.Add(onset), End: start.Add(end)}}
		}
		return tr
	}
	xid := func(onset, end, effectsEnd time.Duration) *faultlab.Truth {
		tr := truth(onset, end)
		tr.Faults[0].Cause = "gpu.xid_error"
		if effectsEnd > 0 {
			tr.Faults[0].EffectsEnd = start.Add(effectsEnd)
		}
		return tr
	}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	tests := []struct {
		q          Question
		prefix     time.Duration
		tr         *faultlab.Truth
		from       time.Time
		ended, scr bool
	}{
		{NoEarlierData, 0, truth(5*time.Minute, 30*time.Minute), at(0), false, true},
		{HealthyBefore, 15 * time.Minute, truth(20*time.Minute, 30*time.Minute), at(15 * time.Minute), false, true},
		{FaultBefore, 15 * time.Minute, truth(20*time.Minute, 30*time.Minute), at(24 * time.Minute), false, true},
		{FaultBefore, 15 * time.Minute, truth(17*time.Minute, 25*time.Minute), at(24 * time.Minute), false, true},
		{FaultBefore, 15 * time.Minute, truth(17*time.Minute, 24*time.Minute), at(24 * time.Minute), true, false},
		{FaultBefore, 15 * time.Minute, truth(0, 0), at(24 * time.Minute), false, false}, // fault-free: not a scored fault run
		// An XID fault whose last XID's hang and restart ended before the
		// window: only the GPU's last XID code is left in it.
		{FaultBefore, 15 * time.Minute, xid(17*time.Minute, 30*time.Minute, 21*time.Minute), at(24 * time.Minute), true, false},
		{FaultBefore, 15 * time.Minute, xid(17*time.Minute, 30*time.Minute, 25*time.Minute), at(24 * time.Minute), false, true},
		{FaultBefore, 15 * time.Minute, xid(17*time.Minute, 30*time.Minute, 0), at(24 * time.Minute), false, true},
	}
	for i, tc := range tests {
		w, ended := questionWindow(tc.q, tc.tr, tc.prefix, 30*time.Minute-tc.prefix)
		if !w.Start.Equal(tc.from) || !w.End.Equal(tc.tr.End) || ended != tc.ended {
			t.Errorf("%d %s: window [%v, %v) ended %v, want from %v, ended %v", i, tc.q, w.Start, w.End, ended, tc.from, tc.ended)
		}
		r := Run{FaultFree: len(tc.tr.Faults) == 0, Ended: ended}
		if r.Scored() != tc.scr {
			t.Errorf("%d %s: scored %v, want %v", i, tc.q, r.Scored(), tc.scr)
		}
	}
}
