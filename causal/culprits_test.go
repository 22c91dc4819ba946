package causal

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/schemas"
)

func sampleIncident() Incident {
	t0 := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	return Incident{
		IncidentID:    "inc-20260314-0900-llama-3-8b",
		Status:        StatusFiring,
		SLO:           SLO{Signal: "e2e_latency", Quantile: 0.99, ThresholdMS: 2500, Scope: map[string]string{"model": "llama-3-8b"}},
		Window:        Interval{Start: t0, End: t0.Add(30 * time.Minute)},
		Baseline:      Interval{Start: t0.Add(-2 * time.Hour), End: t0},
		ObservedP99MS: 6120, BaselineP99MS: 1890, Requests: 48210, TailRequests: 1733,
		Culprits: []Culprit{
			{
				Cause:    schemas.CauseLongPrompts,
				Entity:   Entity{Model: "llama-3-8b"},
				EffectMS: 610, CI95MS: [2]float64{420, 800}, AttributableFraction: 0.18,
				CounterfactualP99MS: 5200, Health: 0.93, AdjustedFor: []string{},
			},
			{
				Cause:    schemas.CauseKVPreemption,
				Entity:   Entity{Host: "node-3", GPU: "GPU-5b1e7c2a-0d4f-4e55-9a43-2f1c9d1e8a77", Engine: "0", Model: "llama-3-8b"},
				EffectMS: 2140, CI95MS: [2]float64{1810, 2470}, AttributableFraction: 0.61,
				CounterfactualP99MS: 2350, Health: 0.07,
				AdjustedFor:      []string{"engine", "prompt_tokens", "completion_tokens", "running"},
				Evidence:         []string{"kv_usage_max ≥ 0.9 on 23% of window requests (baseline 1%)", "preemptions_during > 0 on 19% of requests"},
				ExemplarTraceIDs: []string{"4bf92f3577b34da6a3ce929d0e0e4736"},
			},
		},
		EntityHealth: []EntityHealth{
			{Kind: "engine", Entity: Entity{Host: "node-3", Engine: "0", Pod: "vllm-3-0", Model: "llama-3-8b"}, Health: 0.07, Requests: 6012, TailRequests: 1204},
			{Kind: "host", Entity: Entity{Host: "node-3"}, Health: 0.11, Requests: 12040, TailRequests: 1290},
		},
		Notes:  []string{"baseline from the window itself"},
		Method: Method{Estimator: Estimator, DAG: "default@1", Version: "v0.1.0"},
	}
}

func TestIncidentGolden(t *testing.T) {
	in := sampleIncident()
	RankCulprits(in.Culprits)
	if in.Culprits[0].Cause != schemas.CauseKVPreemption || in.Culprits[0].Rank != 1 || in.Culprits[1].Rank != 2 {
		t.Fatalf("ranking: %+v", in.Culprits)
	}
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "incident.golden.json", string(b)+"\n")

	// Round trip.
	var back Incident
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Window.Start.Equal(in.Window.Start) || len(back.Culprits) != 2 || back.Culprits[0].CI95MS != in.Culprits[0].CI95MS {
		t.Errorf("round trip changed the incident: %+v", back)
	}
}

func TestIncidentOK(t *testing.T) {
	in := sampleIncident()
	in.Status = StatusOK
	in.Culprits = nil
	in.SLO.Scope = nil
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, `"culprits":[]`) || !strings.Contains(s, `"scope":{}`) {
		t.Errorf("empty lists must be [] / {}: %s", s)
	}
	if err := in.Validate(); err != nil {
		t.Error(err)
	}
	in.Culprits = []Culprit{{Rank: 1, Cause: "bogus", Health: 2}}
	if err := in.Validate(); err == nil {
		t.Error("bad incident accepted")
	}
	in.Culprits = nil
	in.EntityHealth = []EntityHealth{{Kind: "host", Health: 0.5, Requests: 10, TailRequests: 1}, {Kind: "rack", Health: 0.2, Requests: 1, TailRequests: 2}}
	err = in.Validate()
	for _, want := range []string{"kind \"rack\"", "2 tail of 1", "not ordered"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("entity_health error %v does not say %q", err, want)
		}
	}
}

// TestIncidentSchema checks the golden document against the JSON Schema in
// schemas/: every required property is present at each level, and no
// property is written that the schema does not declare.
func TestIncidentSchema(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(schemas.CulpritsV1Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	b, err := os.ReadFile("testdata/incident.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	defs, _ := schema["$defs"].(map[string]any)
	var check func(path string, sch map[string]any, v any)
	check = func(path string, sch map[string]any, v any) {
		if ref, ok := sch["$ref"].(string); ok {
			sch = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		switch sch["type"] {
		case "object":
			obj, ok := v.(map[string]any)
			if !ok {
				t.Errorf("%s: not an object", path)
				return
			}
			props, _ := sch["properties"].(map[string]any)
			req, _ := sch["required"].([]any)
			for _, r := range req {
				if _, ok := obj[r.(string)]; !ok {
					t.Errorf("%s: required %q missing", path, r)
				}
			}
			for k, val := range obj {
				ps, ok := props[k].(map[string]any)
				if !ok {
					if ap, ok := sch["additionalProperties"].(map[string]any); ok {
						check(path+"."+k, ap, val)
						continue
					}
					t.Errorf("%s: property %q not in the schema", path, k)
					continue
				}
				check(path+"."+k, ps, val)
			}
		case "array":
			arr, ok := v.([]any)
			if !ok {
				t.Errorf("%s: not an array", path)
				return
			}
			if items, ok := sch["items"].(map[string]any); ok {
				for i, it := range arr {
					check(path+"["+string(rune('0'+i))+"]", items, it)
				}
			}
		}
	}
	check("$", schema, doc)
}
