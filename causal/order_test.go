package causal

import (
	"strings"
	"testing"
)

func TestOrderByMechanism(t *testing.T) {
	g, err := DefaultDAG()
	if err != nil {
		t.Fatal(err)
	}
	scope := Entity{Model: "m"}
	eng := Entity{Host: "h", Engine: "0", Pod: "p", GPU: "G", Model: "m"}
	gpu := Entity{Host: "h", GPU: "G"}
	cands := func(cs []Culprit, nodes ...string) []Candidate {
		var out []Candidate
		for i, c := range cs {
			// "!" marks a symptom (Candidate.Symptom).
			n, symptom := strings.CutSuffix(nodes[i], "!")
			out = append(out, Candidate{Cause: c.Cause, Entity: c.Entity, Node: n, Culprit: true, Symptom: symptom})
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
			[]Culprit{{Cause: CausePrefillInterference, Entity: scope}, {Cause: CauseLongPrompts, Entity: scope}},
			[]string{"prefill_load", "prompt_mix"},
			[]Cause{CauseLongPrompts, CausePrefillInterference}},
		{"a mix localized to one engine is routing: the engine mechanism stays first",
			[]Culprit{{Cause: CauseLongPrompts, Entity: eng}, {Cause: CausePrefillInterference, Entity: eng}},
			[]string{"prompt_mix", "prefill_load"},
			[]Cause{CausePrefillInterference, CauseLongPrompts}},
		{"entity.degraded below a measured mechanism on the same GPU",
			[]Culprit{{Cause: CauseEntityDegraded, Entity: eng}, {Cause: CauseMemoryBandwidth, Entity: gpu}},
			[]string{"engine", "dram_active"},
			[]Cause{CauseMemoryBandwidth, CauseEntityDegraded}},
		{"a queue upstream of the prefill load it feeds comes first when more work arrived",
			[]Culprit{{Cause: CausePrefillInterference, Entity: eng}, {Cause: CauseQueueSaturation, Entity: eng}},
			[]string{"prefill_load", "in_system"},
			[]Cause{CauseQueueSaturation, CausePrefillInterference}},
		{"a queue that is a symptom ranks below the prefill load on its engine, upstream or not",
			[]Culprit{{Cause: CauseQueueSaturation, Entity: eng}, {Cause: CausePrefillInterference, Entity: eng}},
			[]string{"in_system!", "prefill_load"},
			[]Cause{CausePrefillInterference, CauseQueueSaturation}},
		{"a symptom ranks below entity.degraded on its engine",
			[]Culprit{{Cause: CauseQueueSaturation, Entity: eng}, {Cause: CauseEntityDegraded, Entity: eng}},
			[]string{"in_system!", "engine"},
			[]Cause{CauseEntityDegraded, CauseQueueSaturation}},
		{"a symptom ranks below a GPU culprit under its engine",
			[]Culprit{{Cause: CauseQueueSaturation, Entity: eng}, {Cause: CauseMemoryBandwidth, Entity: gpu}},
			[]string{"in_system!", "dram_active"},
			[]Cause{CauseMemoryBandwidth, CauseQueueSaturation}},
		{"a symptom ranks below a GPU culprit on its host (a tensor-parallel engine names no GPU)",
			[]Culprit{{Cause: CauseQueueSaturation, Entity: Entity{Host: "h", Engine: "0", Pod: "p", Model: "m"}}, {Cause: CausePowerCap, Entity: gpu}},
			[]string{"in_system!", "power_cap"},
			[]Cause{CausePowerCap, CauseQueueSaturation}},
		{"a symptom keeps its place before a culprit elsewhere",
			[]Culprit{{Cause: CauseQueueSaturation, Entity: eng}, {Cause: CauseThermalThrottle, Entity: Entity{Host: "h2", GPU: "G2"}}},
			[]string{"in_system!", "thermal_throttle"},
			[]Cause{CauseQueueSaturation, CauseThermalThrottle}},
		{"a degraded host ranks below a measured mechanism on one of its GPUs",
			[]Culprit{{Cause: CauseEntityDegraded, Entity: Entity{Host: "h"}}, {Cause: CauseMemoryBandwidth, Entity: gpu}},
			[]string{"engine", "dram_active"},
			[]Cause{CauseMemoryBandwidth, CauseEntityDegraded}},
		{"a symptom on an engine ranks below its degraded host",
			[]Culprit{{Cause: CauseQueueSaturation, Entity: eng}, {Cause: CauseEntityDegraded, Entity: Entity{Host: "h"}}},
			[]string{"in_system!", "engine"},
			[]Cause{CauseEntityDegraded, CauseQueueSaturation}},
		{"a degraded host keeps its place before a culprit on another host",
			[]Culprit{{Cause: CauseEntityDegraded, Entity: Entity{Host: "h"}}, {Cause: CauseThermalThrottle, Entity: Entity{Host: "h2", GPU: "G2"}}},
			[]string{"engine", "thermal_throttle"},
			[]Cause{CauseEntityDegraded, CauseThermalThrottle}},
		{"unrelated culprits keep their order",
			[]Culprit{{Cause: CauseThermalThrottle, Entity: gpu}, {Cause: CauseLongOutputs, Entity: scope}},
			[]string{"thermal_throttle", "output_mix"},
			[]Cause{CauseThermalThrottle, CauseLongOutputs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]Culprit(nil), tc.in...)
			got := orderByMechanism(g, in, cands(tc.in, tc.nodes...), nil)
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
		{Cause: CauseLongPrompts, Entity: scope, Node: "prompt_mix", Culprit: true},
		{Cause: CauseLongPrompts, Entity: scope, Node: "prompt_tokens", Culprit: true},
	}
	cands[0].Estimate.Attributed.Value = 0.551234567
	cands[1].Estimate.Attributed.Value = 0.3
	cs := []Culprit{
		{Cause: CauseLongPrompts, Entity: scope, AttributableFraction: round(0.551234567, 4)},
		{Cause: CauseLongPrompts, Entity: scope, AttributableFraction: 0.3},
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
	g, err := DefaultDAG()
	if err != nil {
		t.Fatal(err)
	}
	scope := Entity{Model: "m"}
	in := []Culprit{{Cause: CausePrefixMiss, Entity: scope, AttributableFraction: 0.9}, {Cause: CauseLongPrompts, Entity: scope, AttributableFraction: 0.2}}
	cs := []Candidate{{Cause: CausePrefixMiss, Entity: scope, Node: "prefix_miss", Culprit: true}, {Cause: CauseLongPrompts, Entity: scope, Node: "prompt_mix", Culprit: true}}
	for _, tc := range []struct {
		mediated bool
		want     Cause
	}{{true, CauseLongPrompts}, {false, CausePrefixMiss}} {
		var asked []string
		med := func(up, down string, _, _ Culprit) bool {
			asked = append(asked, up+"→"+down)
			return tc.mediated
		}
		got := orderByMechanism(g, append([]Culprit(nil), in...), cs, med)
		if got[0].Cause != tc.want {
			t.Errorf("mediated %v: first %s, want %s", tc.mediated, got[0].Cause, tc.want)
		}
		if len(asked) == 0 || asked[0] != "prompt_mix→prefix_miss" {
			t.Errorf("mediated %v: asked %v", tc.mediated, asked)
		}
	}
}

// peerDemand: without a baseline, a queue on an engine that got no more
// arrivals than its peers is a symptom; one that got far more is demand.
func TestPeerDemand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		own     float64
		symptom bool
		rise    float64
	}{{"same arrivals as its peers", 1000, true, 0}, {"twice the arrivals", 2000, false, 2}} {
		r := &run{cfg: DefaultConfig(), engines: map[string]*entityStats{
			"a": {key: "a", nw: tc.own}, "b": {key: "b", nw: 1000}, "c": {key: "c", nw: 980}, "d": {key: "d", nw: 1020},
		}}
		c := &causeRun{entityKey: "a"}
		r.peerDemand(c)
		if c.cand.Symptom != tc.symptom || c.cand.DemandRise != tc.rise || len(c.cand.Evidence) != 1 {
			t.Errorf("%s: symptom %v, rise %v, evidence %q", tc.name, c.cand.Symptom, c.cand.DemandRise, c.cand.Evidence)
		}
	}
}
