package causal

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/causal/dag"
	"github.com/tailcause/tailcause/causal/stats"
	"github.com/tailcause/tailcause/schemas"
)

func TestOrderByMechanism(t *testing.T) {
	g, err := dag.Default()
	if err != nil {
		t.Fatal(err)
	}
	scope := Entity{Model: "m"}
	eng := Entity{Host: "h", Engine: "0", Pod: "p", GPU: "G", Model: "m"}
	gpu := Entity{Host: "h", GPU: "G"}
	cands := func(cs []Culprit, nodes ...string) []Candidate {
		var out []Candidate
		for i, c := range cs {
			// "!" marks a symptom (Candidate.Symptom), "^" one of work
			// moved to the entity (Candidate.MovedLoad), "*" an entity
			// that is the whole scope (Candidate.WholeScope).
			n, moved := strings.CutSuffix(nodes[i], "^")
			n, symptom := strings.CutSuffix(n, "!")
			n, whole := strings.CutSuffix(n, "*")
			out = append(out, Candidate{Cause: c.Cause, Entity: c.Entity, Node: n, Culprit: true, Symptom: symptom || moved, MovedLoad: moved, WholeScope: whole})
		}
		return out
	}
	order := func(cs []Culprit) []Cause {
		var out []Cause
		for _, c := range cs {
			out = append(out, c.Cause)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		in    []Culprit
		nodes []string
		want  []Cause
	}{
		{"scope-wide prompt mix outranks the prefill load it drives",
			[]Culprit{{Cause: schemas.CausePrefillInterference, Entity: scope}, {Cause: schemas.CauseLongPrompts, Entity: scope}},
			[]string{"prefill_load", "prompt_mix"},
			[]Cause{schemas.CauseLongPrompts, schemas.CausePrefillInterference}},
		{"a mix localized to one engine is routing: the engine mechanism stays first",
			[]Culprit{{Cause: schemas.CauseLongPrompts, Entity: eng}, {Cause: schemas.CausePrefillInterference, Entity: eng}},
			[]string{"prompt_mix", "prefill_load"},
			[]Cause{schemas.CausePrefillInterference, schemas.CauseLongPrompts}},
		{"entity.degraded below a measured mechanism on the same GPU",
			[]Culprit{{Cause: schemas.CauseEntityDegraded, Entity: eng}, {Cause: schemas.CauseMemoryBandwidth, Entity: gpu}},
			[]string{"engine", "dram_active"},
			[]Cause{schemas.CauseMemoryBandwidth, schemas.CauseEntityDegraded}},
		{"a queue upstream of the prefill load it feeds comes first when more work arrived",
			[]Culprit{{Cause: schemas.CausePrefillInterference, Entity: eng}, {Cause: schemas.CauseQueueSaturation, Entity: eng}},
			[]string{"prefill_load", "in_system"},
			[]Cause{schemas.CauseQueueSaturation, schemas.CausePrefillInterference}},
		{"a queue that is a symptom ranks below the prefill load on its engine, upstream or not",
			[]Culprit{{Cause: schemas.CauseQueueSaturation, Entity: eng}, {Cause: schemas.CausePrefillInterference, Entity: eng}},
			[]string{"in_system!", "prefill_load"},
			[]Cause{schemas.CausePrefillInterference, schemas.CauseQueueSaturation}},
		{"prefix misses the longer prompts diluted rank below the prefill load on their engine",
			[]Culprit{{Cause: schemas.CausePrefixMiss, Entity: eng, AttributableFraction: 0.06}, {Cause: schemas.CausePrefillInterference, Entity: eng, AttributableFraction: 0.04}},
			[]string{"prefix_miss!", "prefill_load"},
			[]Cause{schemas.CausePrefillInterference, schemas.CausePrefixMiss}},
		{"a symptom ranks below entity.degraded on its engine",
			[]Culprit{{Cause: schemas.CauseQueueSaturation, Entity: eng}, {Cause: schemas.CauseEntityDegraded, Entity: eng}},
			[]string{"in_system!", "engine"},
			[]Cause{schemas.CauseEntityDegraded, schemas.CauseQueueSaturation}},
		{"a symptom ranks below a GPU culprit under its engine",
			[]Culprit{{Cause: schemas.CauseQueueSaturation, Entity: eng}, {Cause: schemas.CauseMemoryBandwidth, Entity: gpu}},
			[]string{"in_system!", "dram_active"},
			[]Cause{schemas.CauseMemoryBandwidth, schemas.CauseQueueSaturation}},
		{"a symptom ranks below a GPU culprit on its host (a tensor-parallel engine names no GPU)",
			[]Culprit{{Cause: schemas.CauseQueueSaturation, Entity: Entity{Host: "h", Engine: "0", Pod: "p", Model: "m"}}, {Cause: schemas.CausePowerCap, Entity: gpu}},
			[]string{"in_system!", "power_cap"},
			[]Cause{schemas.CausePowerCap, schemas.CauseQueueSaturation}},
		{"a symptom keeps its place before a culprit elsewhere",
			[]Culprit{{Cause: schemas.CauseQueueSaturation, Entity: eng}, {Cause: schemas.CauseThermalThrottle, Entity: Entity{Host: "h2", GPU: "G2"}}},
			[]string{"in_system!", "thermal_throttle"},
			[]Cause{schemas.CauseQueueSaturation, schemas.CauseThermalThrottle}},
		{"a host slowed by the work moved to it ranks below a culprit on another host",
			[]Culprit{{Cause: schemas.CauseEntityDegraded, Entity: Entity{Host: "h"}}, {Cause: schemas.CauseXIDError, Entity: Entity{Host: "h2"}}},
			[]string{"engine^", "xid"},
			[]Cause{schemas.CauseXIDError, schemas.CauseEntityDegraded}},
		{"a degraded host ranks below a measured mechanism on one of its GPUs",
			[]Culprit{{Cause: schemas.CauseEntityDegraded, Entity: Entity{Host: "h"}}, {Cause: schemas.CauseMemoryBandwidth, Entity: gpu}},
			[]string{"engine", "dram_active"},
			[]Cause{schemas.CauseMemoryBandwidth, schemas.CauseEntityDegraded}},
		{"a symptom on an engine ranks below its degraded host",
			[]Culprit{{Cause: schemas.CauseQueueSaturation, Entity: eng}, {Cause: schemas.CauseEntityDegraded, Entity: Entity{Host: "h"}}},
			[]string{"in_system!", "engine"},
			[]Cause{schemas.CauseEntityDegraded, schemas.CauseQueueSaturation}},
		{"a degraded host keeps its place before a culprit on another host",
			[]Culprit{{Cause: schemas.CauseEntityDegraded, Entity: Entity{Host: "h"}}, {Cause: schemas.CauseThermalThrottle, Entity: Entity{Host: "h2", GPU: "G2"}}},
			[]string{"engine", "thermal_throttle"},
			[]Cause{schemas.CauseEntityDegraded, schemas.CauseThermalThrottle}},
		{"the scope's only host, degraded, ranks below a scope-wide mechanism explaining half as much of the tail",
			[]Culprit{{Cause: schemas.CauseEntityDegraded, Entity: Entity{Host: "h", Model: "m"}, AttributableFraction: 1}, {Cause: schemas.CausePrefixMiss, Entity: scope, AttributableFraction: 0.6}},
			[]string{"engine*", "prefix_miss"},
			[]Cause{schemas.CausePrefixMiss, schemas.CauseEntityDegraded}},
		{"the scope's only host, degraded, keeps its place before a scope-wide mechanism explaining far less",
			[]Culprit{{Cause: schemas.CauseEntityDegraded, Entity: Entity{Host: "h", Model: "m"}, AttributableFraction: 1}, {Cause: schemas.CausePrefixMiss, Entity: scope, AttributableFraction: 0.3}},
			[]string{"engine*", "prefix_miss"},
			[]Cause{schemas.CauseEntityDegraded, schemas.CausePrefixMiss}},
		{"a degraded host among others keeps its place before a scope-wide mechanism",
			[]Culprit{{Cause: schemas.CauseEntityDegraded, Entity: Entity{Host: "h", Model: "m"}, AttributableFraction: 1}, {Cause: schemas.CausePrefixMiss, Entity: scope, AttributableFraction: 0.9}},
			[]string{"engine", "prefix_miss"},
			[]Cause{schemas.CauseEntityDegraded, schemas.CausePrefixMiss}},
		{"unrelated culprits keep their order",
			[]Culprit{{Cause: schemas.CauseThermalThrottle, Entity: gpu}, {Cause: schemas.CauseLongOutputs, Entity: scope}},
			[]string{"thermal_throttle", "output_mix"},
			[]Cause{schemas.CauseThermalThrottle, schemas.CauseLongOutputs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]Culprit(nil), tc.in...)
			got := orderByMechanism(g, in, cands(tc.in, tc.nodes...), nil, nil)
			if g, w := order(got), tc.want; len(g) != len(w) || g[0] != w[0] || g[1] != w[1] {
				t.Errorf("order %v, want %v", g, w)
			}
			for i, c := range got {
				if c.Rank != i+1 {
					t.Errorf("rank %d at %d", c.Rank, i)
				}
			}
		})
	}
}

// TestDedupeCulpritsKeepsTheWinnersCandidate: two nodes measure one cause;
// the better one stays a culprit (its AF is compared as rounded in the
// culprit), the other does not.
func TestDedupeCulpritsKeepsTheWinnersCandidate(t *testing.T) {
	scope := Entity{Model: "m"}
	cands := []Candidate{
		{Cause: schemas.CauseLongPrompts, Entity: scope, Node: "prompt_mix", Culprit: true},
		{Cause: schemas.CauseLongPrompts, Entity: scope, Node: "prompt_tokens", Culprit: true},
	}
	cands[0].Estimate.Attributed.Value = 0.551234567
	cands[1].Estimate.Attributed.Value = 0.3
	cs := []Culprit{
		{Cause: schemas.CauseLongPrompts, Entity: scope, AttributableFraction: round(0.551234567, 4)},
		{Cause: schemas.CauseLongPrompts, Entity: scope, AttributableFraction: 0.3},
	}
	got := dedupeCulprits(cs, cands)
	if len(got) != 1 || got[0].Rank != 1 || !cands[0].Culprit || cands[1].Culprit {
		t.Fatalf("culprits %+v, candidates culprit flags %v %v", got, cands[0].Culprit, cands[1].Culprit)
	}
}

// An upstream culprit whose attributable fraction is far below its
// mediator's still ranks first when its shift explains the mediator's
// (mediates); otherwise the order stays.
func TestOrderByMechanismMediated(t *testing.T) {
	g, err := dag.Default()
	if err != nil {
		t.Fatal(err)
	}
	scope := Entity{Model: "m"}
	in := []Culprit{{Cause: schemas.CausePrefixMiss, Entity: scope, AttributableFraction: 0.9}, {Cause: schemas.CauseLongPrompts, Entity: scope, AttributableFraction: 0.2}}
	cs := []Candidate{{Cause: schemas.CausePrefixMiss, Entity: scope, Node: "prefix_miss", Culprit: true}, {Cause: schemas.CauseLongPrompts, Entity: scope, Node: "prompt_mix", Culprit: true}}
	for _, tc := range []struct {
		mediated bool
		want     Cause
	}{{true, schemas.CauseLongPrompts}, {false, schemas.CausePrefixMiss}} {
		var asked []string
		med := func(up, down string, _, _ Culprit) bool {
			asked = append(asked, up+"→"+down)
			return tc.mediated
		}
		got := orderByMechanism(g, append([]Culprit(nil), in...), cs, med, nil)
		if got[0].Cause != tc.want {
			t.Errorf("mediated %v: first %s, want %s", tc.mediated, got[0].Cause, tc.want)
		}
		if len(asked) == 0 || asked[0] != "prompt_mix→prefix_miss" {
			t.Errorf("mediated %v: asked %v", tc.mediated, asked)
		}
	}
}

// peerDemand: without a baseline, a queue on an engine that got no more
// arrivals than its peers is a symptom; one that got far more is demand,
// unless the work it got had prompts a quarter longer than its peers'
// (longerWork: the prompts' prefill is the cause, the queue its symptom).
func TestPeerDemand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		own     float64
		longer  float64 // its prompts over its peers' in the window
		symptom bool
		rise    float64
	}{
		{"same arrivals as its peers", 1000, 1, true, 0},
		{"twice the arrivals", 2000, 1.05, false, 2},
		{"twice the arrivals, prompts ×2.5 as long", 2000, 2.5, true, 0},
	} {
		r := &run{cfg: DefaultConfig(), engines: map[string]*entityStats{
			"a": {key: "a", nw: tc.own}, "b": {key: "b", nw: 1000}, "c": {key: "c", nw: 980}, "d": {key: "d", nw: 1020},
		}}
		c := &causeRun{entityKey: "a", longer: &tc.longer}
		if err := r.peerDemand(c); err != nil {
			t.Fatal(err)
		}
		if c.cand.Symptom != tc.symptom || c.cand.DemandRise != tc.rise || len(c.cand.Evidence) != 1 {
			t.Errorf("%s: symptom %v, rise %v, evidence %q", tc.name, c.cand.Symptom, c.cand.DemandRise, c.cand.Evidence)
		}
	}
}

// scopeWideFirst and focusCulprits: a scope-wide mechanism passes the
// focused entity's culprits when it explains more than an entity.degraded
// there and more than twice any measured mechanism there; a symptom there
// is no rival.
func TestFocusScopeWideFirst(t *testing.T) {
	pod := Entity{Host: "h1", Engine: "0", Pod: "p1", Model: "m"}
	scope := Entity{Model: "m"}
	af := func(v, lo float64) stats.CauseEstimate {
		return stats.CauseEstimate{Attributed: stats.Fraction{Value: v, CI: [2]float64{lo, 2*v - lo}}}
	}
	for _, tc := range []struct {
		name      string
		onCause   Cause
		onAF      float64
		onSymptom bool
		wideAF    float64
		wideLow   float64
		want      bool
	}{
		{"larger than an unexplained slowdown", schemas.CauseEntityDegraded, 0.56, false, 0.74, 0.55, true},
		{"smaller than an unexplained slowdown", schemas.CauseEntityDegraded, 0.56, false, 0.50, 0.40, false},
		{"near-equal to a measured mechanism", schemas.CauseKVPreemption, 0.080, false, 0.084, 0.071, false},
		{"far above a measured mechanism", schemas.CausePCIeContention, 0.20, false, 0.35, 0.25, false},
		// A model-wide KV-cache collapse (tuning seed 981) against a PCIe
		// culprit on one pod's host.
		{"over twice a measured mechanism", schemas.CausePCIeContention, 0.069, false, 0.88, 0.80, true},
		{"only a symptom on the entity", schemas.CauseQueueSaturation, 0.40, true, 0.30, 0.20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := []Culprit{
				{Rank: 1, Cause: tc.onCause, Entity: pod, AttributableFraction: tc.onAF},
				{Rank: 2, Cause: schemas.CausePrefixMiss, Entity: scope, AttributableFraction: tc.wideAF},
				{Rank: 3, Cause: schemas.CauseThermalThrottle, Entity: Entity{Host: "h2", GPU: "g9"}, AttributableFraction: 0.9},
			}
			cands := []Candidate{
				{Cause: tc.onCause, Entity: pod, Culprit: true, Symptom: tc.onSymptom, Estimate: af(tc.onAF, tc.onAF/2)},
				{Cause: schemas.CausePrefixMiss, Entity: scope, Culprit: true, Estimate: af(tc.wideAF, tc.wideLow)},
				{Cause: schemas.CauseThermalThrottle, Entity: Entity{Host: "h2", GPU: "g9"}, Culprit: true, Estimate: af(0.9, 0.8)},
			}
			if got := scopeWideFirst(cs, cands, pod); got != tc.want {
				t.Fatalf("scopeWideFirst %v, want %v", got, tc.want)
			}
			// The focus keeps the order of the entity's and the scope's
			// culprits when the scope-wide one comes first, and a culprit of
			// another entity (the GPU on h2) goes after them.
			in := []Culprit{cs[2], cs[1], cs[0]}
			got := focusCulprits(append([]Culprit(nil), in...), cands, pod)
			if tc.want && got[len(got)-1].Cause != schemas.CauseThermalThrottle {
				t.Errorf("order %v: the other entity's culprit not last", got)
			}
			first := got[0].Cause
			if tc.want && first != schemas.CausePrefixMiss || !tc.want && first != tc.onCause {
				t.Errorf("order %v: first %s", got, first)
			}
			for i, c := range got {
				if c.Rank != i+1 {
					t.Errorf("rank %d at %d", c.Rank, i)
				}
			}
		})
	}
}

// KV pressure ranks before the prefix-cache misses on its engine when
// evicts says they are its evictions; otherwise the order stays.
func TestOrderByMechanismEvictions(t *testing.T) {
	g, err := dag.Default()
	if err != nil {
		t.Fatal(err)
	}
	pod := Entity{Host: "h", Engine: "0", Pod: "p", Model: "m"}
	in := []Culprit{{Cause: schemas.CausePrefixMiss, Entity: pod, AttributableFraction: 0.99}, {Cause: schemas.CauseKVPreemption, Entity: pod, AttributableFraction: 0.9}}
	cs := []Candidate{{Cause: schemas.CausePrefixMiss, Entity: pod, Node: "prefix_miss", Culprit: true}, {Cause: schemas.CauseKVPreemption, Entity: pod, Node: "kv_usage", Culprit: true}}
	for _, evicted := range []bool{true, false} {
		got := orderByMechanism(g, append([]Culprit(nil), in...), cs, nil, func(kv, prefix Culprit) bool {
			if kv.Cause != schemas.CauseKVPreemption || prefix.Cause != schemas.CausePrefixMiss {
				t.Errorf("evicts(%s, %s)", kv.Cause, prefix.Cause)
			}
			return evicted
		})
		want := schemas.CausePrefixMiss
		if evicted {
			want = schemas.CauseKVPreemption
		}
		if got[0].Cause != want || got[0].Rank != 1 {
			t.Errorf("evicted %v: first %s (rank %d), want %s", evicted, got[0].Cause, got[0].Rank, want)
		}
	}
}

// credible: an entity breach stands on an entity.degraded, or on a
// mechanism whose exposure is enriched in the tail; not on one that is
// rarer in the tail than in the baseline.
func TestCredibleCulprit(t *testing.T) {
	host := Entity{Host: "h", Model: "m"}
	for _, tc := range []struct {
		cause    Cause
		enriched bool
		want     bool
	}{{schemas.CauseMemoryBandwidth, false, false}, {schemas.CauseMemoryBandwidth, true, true}, {schemas.CauseEntityDegraded, false, true}} {
		c := Culprit{Cause: tc.cause, Entity: host}
		cands := []Candidate{{Cause: tc.cause, Entity: host, Culprit: true, TailEnriched: tc.enriched}}
		if got := credible(c, cands); got != tc.want {
			t.Errorf("%s enriched %v: credible %v, want %v", tc.cause, tc.enriched, got, tc.want)
		}
	}
	if credible(Culprit{Cause: schemas.CauseKVPreemption, Entity: host}, nil) {
		t.Error("a culprit without its candidate is credible")
	}
}

// confirmEntity: a focused analysis confirms its entity's breach only
// with a credible culprit on the entity that a scope-wide mechanism does
// not outweigh; a deferred scope breach falls back to the scope.
func TestConfirmEntity(t *testing.T) {
	pod := Entity{Host: "node-4", Engine: "0", Pod: "p0", Model: "m"}
	scope := Entity{Model: "m"}
	analysis := func(status string, cs ...Culprit) *Analysis {
		an := &Analysis{}
		an.Incident.Status = status
		for i, c := range cs {
			c.Rank = i + 1
			an.Incident.Culprits = append(an.Incident.Culprits, c)
			an.Candidates = append(an.Candidates, Candidate{Cause: c.Cause, Entity: c.Entity, Culprit: true})
		}
		return an
	}
	// The fault-free tuning run's pod (seed 952): a model-wide
	// prefill-interference culprit at 0.42, the pod's entity.degraded at
	// 0.11.
	swing := analysis(StatusFiring,
		Culprit{Cause: schemas.CausePrefillInterference, Entity: scope, AttributableFraction: 0.42},
		Culprit{Cause: schemas.CauseEntityDegraded, Entity: pod, AttributableFraction: 0.108})
	slow := analysis(StatusFiring,
		Culprit{Cause: schemas.CauseEntityDegraded, Entity: pod, AttributableFraction: 0.19},
		Culprit{Cause: schemas.CausePrefillInterference, Entity: scope, AttributableFraction: 0.06})
	elsewhere := analysis(StatusFiring,
		Culprit{Cause: schemas.CauseThermalThrottle, Entity: Entity{Host: "node-2", GPU: "g9"}, AttributableFraction: 0.3})
	for _, tc := range []struct {
		name     string
		an       *Analysis
		deferred bool
		want     entityVerdict
	}{
		{"a scope-wide swing", swing, false, entityScopeWide},
		{"a scope-wide swing, deferred", swing, true, entityIsScope},
		{"a slow pod", slow, false, entityReported},
		{"a slow pod, deferred", slow, true, entityReported},
		{"a culprit elsewhere", elsewhere, false, entityUnexplained},
		{"a culprit elsewhere, deferred", elsewhere, true, entityIsScope},
		{"no breach", analysis(StatusOK), false, entityNotFiring},
		{"no breach, deferred", analysis(StatusOK), true, entityIsScope},
	} {
		if got := confirmEntity(tc.an, pod, tc.deferred); got != tc.want {
			t.Errorf("%s: verdict %d, want %d", tc.name, got, tc.want)
		}
	}
}

// othersExposed: a mechanism whose exposure rose on the scope's other
// entities too is the scope's; one that left them as they were is the
// entity's own; without a baseline nothing tells.
func TestOthersExposed(t *testing.T) {
	base := Interval{Start: time.Unix(0, 0), End: time.Unix(600, 0)}
	for _, tc := range []struct {
		name              string
		base              *Interval
		in, win, bExp, bN float64
		want              bool
	}{
		{"preemptions on the other pods, none before", &base, 0.16, 0.04, 0, 20000, true},
		{"the other pods as exposed as before", &base, 0.2, 0.05, 1000, 20000, false},
		{"three times, but by less than a point", &base, 0.03, 0.006, 30, 20000, false},
		{"a rise that stays under three times", &base, 0.5, 0.12, 1000, 20000, false},
		// Fresh tuning seed 5723: a peer's ordinary exposure past a short
		// baseline's, a small fraction of the entity's.
		{"risen, a fraction of the entity's", &base, 0.99, 0.036, 0, 1120, false},
		{"risen, over a tenth of the entity's", &base, 0.3, 0.036, 0, 1120, true},
		{"no baseline", nil, 0.16, 0.04, 0, 0, false},
		{"too few baseline rows", &base, 0.16, 0.04, 0, 10, false},
	} {
		r := &run{cfg: DefaultConfig(), base: tc.base}
		if got := r.othersExposed(tc.in, tc.win, tc.bExp, tc.bN); got != tc.want {
			t.Errorf("%s: othersExposed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// othersRateWhileExposed: the others' exposure is read in the minutes the
// entity was exposed, weighted by its exposed requests there; a peer that
// served nothing then tells nothing.
func TestOthersRateWhileExposed(t *testing.T) {
	for _, tc := range []struct {
		name string
		ms   []minuteOthers
		rate float64
		ok   bool
	}{
		{"the others exposed alike, at the same time", []minuteOthers{{own: 10, others: 100, othersExposed: 40}, {own: 30, others: 100, othersExposed: 60}}, 0.55, true},
		// Fresh tuning seed 8707: the peer's exposure came before the
		// fault; while the pod was exposed the peer had no request.
		{"the peer exposed before, idle while the entity was", []minuteOthers{{own: 0, others: 100, othersExposed: 12}, {own: 0, others: 100, othersExposed: 13}, {own: 80, others: 0}, {own: 90, others: 0}}, 0, false},
		{"the peer's few requests in under half of the exposure", []minuteOthers{{own: 10, others: 60, othersExposed: 6}, {own: 90, others: 0}}, 0, false},
		{"too few of the others' requests", []minuteOthers{{own: 50, others: 10, othersExposed: 5}}, 0, false},
		{"exposed minutes unweighted by quiet ones", []minuteOthers{{own: 50, others: 100, othersExposed: 10}, {own: 0, others: 100, othersExposed: 90}}, 0.1, true},
		{"the entity never exposed", []minuteOthers{{own: 0, others: 100, othersExposed: 10}}, 0, false},
	} {
		rate, ok := othersRateWhileExposed(tc.ms, 50)
		if ok != tc.ok || math.Abs(rate-tc.rate) > 1e-12 {
			t.Errorf("%s: rate %v ok %v, want %v %v", tc.name, rate, ok, tc.rate, tc.ok)
		}
	}
}

// judgeDemand: a queue on an engine among peers needs QueueDemandRise
// (×1.5) more arrivals to be demand, since a router may steer traffic to
// it; an engine that serves the whole scope is judged as the scope is
// (ScopeDemandRise, ×1.2): its arrivals are its clients'. A surge that
// began inside the window is judged by the arrivals while the queue was
// long (whileLong), not diluted by the time before it; work that arrived
// with prompts a quarter longer or more is longer work, not more, and the
// queue a symptom (longerWork).
func TestJudgeDemandWholeScopeEngine(t *testing.T) {
	base := Interval{Start: time.Unix(0, 0), End: time.Unix(600, 0)}
	for _, tc := range []struct {
		name      string
		peers     bool
		whileLong float64 // requests/s while the queue was long (NaN: not told)
		longer    float64 // the window's prompts over the baseline's (NaN: not told)
		riseLo    float64 // the lower end of the rise's interval (NaN: not told)
		symptom   bool
	}{
		{"the scope's only engine", false, math.NaN(), 1.05, math.NaN(), false},
		{"the scope's only engine, given prompts ×1.6 as long", false, math.NaN(), 1.6, math.NaN(), true},
		{"the scope's only engine, a rise within the load's swings", false, math.NaN(), 1.05, 0.93, true},
		{"the scope's only engine, a rise past them", false, math.NaN(), 1.05, 1.12, false},
		{"one engine of two", true, math.NaN(), math.NaN(), math.NaN(), true},
		{"one engine of two, twice the rate while its queue was long", true, 3.4, 1, math.NaN(), false},
		{"one engine of two, twice the rate while long, its interval not re-judged", true, 3.4, 1, 0.5, false},
		{"one engine of two, as many while its queue was long", true, 2.3, 1, math.NaN(), true},
	} {
		r := &run{cfg: DefaultConfig(), base: &base, spans: []float64{600, 600},
			engines:    map[string]*entityStats{"h/a/0": {key: "h/a/0", nw: 1400, nb: 1000}},
			placements: []placementRow{{host: "h", pod: "a", engine: "0", nw: 1400, nb: 1000}}}
		if tc.peers {
			r.engines["h/b/0"] = &entityStats{key: "h/b/0", nw: 1000, nb: 1000}
			r.placements = append(r.placements, placementRow{host: "h", pod: "b", engine: "0", nw: 1000, nb: 1000})
		}
		c := &causeRun{entityKey: "h/a/0", whileLong: &tc.whileLong, longer: &tc.longer, riseLo: &tc.riseLo}
		if err := r.judgeDemand(c); err != nil {
			t.Fatal(err)
		}
		if c.cand.Symptom != tc.symptom {
			t.Errorf("%s: arrivals ×1.4, symptom %v, want %v (%q)", tc.name, c.cand.Symptom, tc.symptom, c.cand.Evidence)
		}
	}
}

// rateWhileLong: the arrival rate of the minutes a queue was long,
// weighted by their exposed requests; not told under the floor of exposed
// requests, or when the work that came while it was long had prompts a
// quarter longer than the baseline's (longer work, the prefill's matter).
func TestRateWhileLong(t *testing.T) {
	win := Interval{Start: time.Unix(0, 0), End: time.Unix(600, 0)} // minutes 0..9
	minutes := func(prompt float64, exposedFrom int) []minuteArrivals {
		ms := []minuteArrivals{{minute: -1, n: 6000, prompt: 1000}}
		for m := range 10 {
			a := minuteArrivals{minute: float64(m), n: 60, prompt: 1000}
			if m >= exposedFrom {
				a.n, a.exposed, a.prompt = 180, 150, prompt
			}
			ms = append(ms, a)
		}
		return ms
	}
	for _, tc := range []struct {
		name string
		ms   []minuteArrivals
		rate float64
		ok   bool
	}{
		{"a surge in the last four minutes", minutes(1050, 6), 3, true},
		{"long prompts steered there", minutes(2500, 6), 0, false},
		{"too few exposed", minutes(1000, 10), 0, false},
	} {
		rate, ok := rateWhileLong(tc.ms, win, 30)
		if ok != tc.ok || math.Abs(rate-tc.rate) > 1e-9 {
			t.Errorf("%s: rate %v ok %v, want %v %v", tc.name, rate, ok, tc.rate, tc.ok)
		}
	}
}

// shareWhileLong: an entity's share of the scope's arrivals in the
// minutes its queue was long (weighted by its exposed requests) over its
// baseline share; a surge on the whole scope leaves it at 1.
func TestShareWhileLong(t *testing.T) {
	minutes := func(own, all float64) []minuteShare {
		ms := []minuteShare{{minute: -1, own: 3000, all: 10000}}
		for m := range 6 {
			s := minuteShare{minute: float64(m), own: 300, all: 1000}
			if m >= 3 {
				s.own, s.all, s.exposed = own, all, 200
			}
			ms = append(ms, s)
		}
		return ms
	}
	for _, tc := range []struct {
		name string
		ms   []minuteShare
		rise float64
		ok   bool
	}{
		{"its peers' work moved to it", minutes(660, 1000), 2.2, true},
		{"a surge on the whole scope", minutes(600, 2000), 1, true},
		{"too few exposed", minutes(660, 1000)[:4], 0, false},
		{"no baseline share", append([]minuteShare{{minute: -1}}, minutes(660, 1000)[1:]...), 0, false},
	} {
		rise, ok := shareWhileLong(tc.ms, 300)
		if ok != tc.ok || math.Abs(rise-tc.rise) > 1e-9 {
			t.Errorf("%s: rise %v ok %v, want %v %v", tc.name, rise, ok, tc.rise, tc.ok)
		}
	}
}

// elevatedAt: a quantile below the maximum is exposed above it; one at the
// maximum (a ratio whose top 5% sit at 1) exposes the maximum itself.
func TestElevatedAtCeiling(t *testing.T) {
	ramp := make([]float64, len(gridProbs))
	capped := make([]float64, len(gridProbs))
	for i, p := range gridProbs {
		ramp[i] = p
		capped[i] = math.Min(1, 1.2*p)
	}
	if v, label := elevatedAt("x", ramp, 0.95, "baseline P95"); v != 0.95 || label != "x above 0.95 (baseline P95)" {
		t.Errorf("ramp: %v %q", v, label)
	}
	v, label := elevatedAt("x", capped, 0.95, "baseline P95")
	if v >= 1 || v < 0.9999 || label != "x at 1 (baseline P95, its maximum)" {
		t.Errorf("capped: %v %q", v, label)
	}
}

// explainedOn: an entity found only within ExplainedScanFactor of the
// scan's level is a breach when the first culprit acting on it is a
// measured mechanism there, credible and not a symptom; not when it is
// entity.degraded, a symptom, not enriched in the tail, or when nothing
// acts on it.
func TestExplainedOn(t *testing.T) {
	gpu := Entity{Host: "node-3", GPU: "g2", Engine: "0", Pod: "p2", Model: "m"}
	pod := Entity{Host: "node-3", Pod: "p2", Model: "m"}
	an := func(cands ...Candidate) *Analysis {
		a := &Analysis{}
		a.Incident.Status = StatusFiring
		for _, k := range cands {
			k.Culprit = true
			a.Candidates = append(a.Candidates, k)
			a.Incident.Culprits = append(a.Incident.Culprits, Culprit{Cause: k.Cause, Entity: k.Entity})
		}
		return a
	}
	capped := Candidate{Cause: schemas.CausePowerCap, Entity: gpu, TailEnriched: true}
	degraded := Candidate{Cause: schemas.CauseEntityDegraded, Entity: gpu}
	queue := Candidate{Cause: schemas.CauseQueueSaturation, Entity: gpu, TailEnriched: true, Symptom: true}
	rare := Candidate{Cause: schemas.CauseMemoryBandwidth, Entity: gpu}
	elsewhere := Candidate{Cause: schemas.CausePowerCap, Entity: Entity{Host: "node-1", GPU: "g0", Model: "m"}, TailEnriched: true}
	for _, tc := range []struct {
		name string
		an   *Analysis
		want bool
	}{
		{"a power cap on its GPU", an(capped, degraded), true},
		{"a power cap after a culprit elsewhere", an(elsewhere, capped), true},
		{"entity.degraded first", an(degraded, capped), false},
		{"a symptom first", an(queue, capped), false},
		{"a mechanism rarer in the tail", an(rare), false},
		{"nothing on it", an(elsewhere), false},
		{"no culprit", an(), false},
	} {
		if got := explainedOn(tc.an, pod); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// explainedOnly: the wider pick less the strict one, a host and an engine
// on it counting as one breach.
func TestExplainedOnly(t *testing.T) {
	e := func(kind, host, pod string) *screened {
		return &screened{kind: kind, key: host + "/" + pod, ent: Entity{Host: host, Pod: pod}}
	}
	a, b, h1, c := e(LevelEngine, "h1", "a"), e(LevelEngine, "h2", "b"), e(LevelHost, "h1", ""), e(LevelEngine, "h3", "c")
	got := explainedOnly([]*screened{a, b, h1, c}, []*screened{a})
	if len(got) != 2 || got[0] != b || got[1] != c {
		t.Errorf("got %d entities, want h2/b and h3/c", len(got))
	}
	if got := explainedOnly([]*screened{h1, c}, []*screened{e(LevelEngine, "h1", "z")}); len(got) != 1 || got[0] != c {
		t.Errorf("a host over a strict engine of it: got %d, want h3/c alone", len(got))
	}
}
