package faultlab

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

const randomSeeds = 400

func randomCases(t *testing.T, o RandomOptions) []*Case {
	t.Helper()
	var out []*Case
	for s := uint64(1); s <= randomSeeds; s++ {
		c, err := RandomCase(s, o)
		if err != nil {
			t.Fatalf("seed %d: %v", s, err)
		}
		out = append(out, c)
	}
	return out
}

func kindOfTarget(t Target) string {
	switch {
	case t.Model != "":
		return "model"
	case t.Host != "":
		return "host"
	case t.GPU != "":
		return "gpu"
	}
	return "engine"
}

// Every drawn case respects the generator's ranges and is a valid run.
func TestRandomCaseRanges(t *testing.T) {
	win := 20 * time.Minute
	cases := randomCases(t, RandomOptions{Window: win})
	var faultFree, decoys, faults, tp1, tpN int
	for _, c := range cases {
		cfg := c.Config
		where := fmt.Sprintf("seed %d (%s)", c.Seed, c.Summary())
		if cfg.Seed != c.Seed || cfg.Duration != win || c.Prefix != 0 || c.Window != win {
			t.Errorf("%s: seed %d, duration %v, prefix %v, window %v", where, cfg.Seed, cfg.Duration, c.Prefix, c.Window)
		}
		fl := cfg.Fleet
		if n := len(fl.Hosts); n < 2 || n > 8 {
			t.Errorf("%s: %d hosts", where, n)
		}
		for _, h := range fl.Hosts {
			if h.GPUs < 1 || h.GPUs > 8 {
				t.Errorf("%s: host %s has %d GPUs", where, h.Name, h.GPUs)
			}
			if _, err := lookupGPU(h.GPU); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
		if n := len(fl.Models); n < 1 || n > 3 {
			t.Errorf("%s: %d models", where, n)
		}
		total := 0.0
		for _, m := range fl.Models {
			if _, err := lookupArch(m.Name); err != nil {
				t.Errorf("%s: %v", where, err)
			}
			switch m.TP {
			case 1:
				tp1++
			case 2, 4:
				tpN++
			default:
				t.Errorf("%s: %s at tp %d", where, m.Name, m.TP)
			}
			if m.Rate < randMinModelRate-0.01 {
				t.Errorf("%s: %s serves %.2f req/s, under %v", where, m.Name, m.Rate, randMinModelRate)
			}
			// (A model given a system prompt for a prefix-cache fault may
			// run up to 1/sysPromptCapFactor above randMaxLoad.)
			if u := c.Load[m.Name]; u < randMinLoad-0.01 || u > randMaxLoad/sysPromptCapFactor+0.01 {
				t.Errorf("%s: %s load %.3f outside [%v, %v]", where, m.Name, u, randMinLoad, randMaxLoad)
			}
			total += m.Rate
		}
		if total > randMaxFleetRate {
			t.Errorf("%s: fleet rate %.1f", where, total)
		}
		if v := cfg.VLLMScrapeInterval; v < 5*time.Second || v > 15*time.Second {
			t.Errorf("%s: engine scrape every %v", where, v)
		}
		if v := cfg.DCGMScrapeInterval; v < 10*time.Second || v > 30*time.Second {
			t.Errorf("%s: DCGM scrape every %v", where, v)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", where, err)
		}
		sc := cfg.Scenario
		if len(sc.Faults) > 1 {
			t.Errorf("%s: %d faults", where, len(sc.Faults))
		}
		if c.FaultFree != (len(sc.Faults) == 0) {
			t.Errorf("%s: fault-free %v with %d faults", where, c.FaultFree, len(sc.Faults))
		}
		if c.FaultFree {
			faultFree++
			for _, d := range sc.Decoys {
				if d.Kind != "workload.rate_swing" {
					t.Errorf("%s: fault-free case with decoy %s", where, d.Kind)
				}
			}
			continue
		}
		faults++
		if len(sc.Decoys) > 0 {
			decoys++
		}
		f := sc.Faults[0]
		cause, ok := lookupCause(causes, f.Cause)
		if !ok {
			t.Fatalf("%s: unknown cause %s", where, f.Cause)
		}
		if k := kindOfTarget(f.Target); !slices.Contains(cause.Targets, k) {
			t.Errorf("%s: %s target not accepted by %s", where, k, f.Cause)
		}
		if !(f.Magnitude > cause.MagMin && f.Magnitude <= cause.MagMax) {
			t.Errorf("%s: magnitude %v outside (%v, %v]", where, f.Magnitude, cause.MagMin, cause.MagMax)
		}
		on, _ := parseOffset(f.Onset, win)
		d, _ := parseOffset(f.Duration, win)
		if on < win/10-time.Second || on > 6*win/10+time.Second {
			t.Errorf("%s: onset %v outside 10–60%% of %v", where, on, win)
		}
		if d < time.Minute || on+d > win+time.Second {
			t.Errorf("%s: fault %v + %v does not fit the run of %v", where, on, d, win)
		}
		fleet, _ := buildFleet(fl, 0)
		for _, ds := range sc.Decoys {
			if overlaps(fleet, ds.Target, f.Target) {
				t.Errorf("%s: decoy %s on %s overlaps the fault's target", where, ds.Kind, targetString(ds.Target))
			}
		}
		if f.Cause == "entity.degraded" && f.Target.GPU != "" && len(fleet.gpuByRef(f.Target.GPU).engine.gpus) != 1 {
			t.Errorf("%s: a slow GPU with no mechanism inside a tensor-parallel engine (indistinguishable from its peers)", where)
		}
		if f.Cause == "prefix_cache.miss" && !hasSystemPrompt(&fleetPlan{spec: fl}, targetModel(fleet, f.Target)) {
			t.Errorf("%s: prefix-cache fault on a model without a system prompt", where)
		}
	}
	if share := float64(faultFree) / float64(len(cases)); share < 0.05 || share > 0.16 {
		t.Errorf("%d of %d cases fault-free (%.2f), want about 0.1", faultFree, len(cases), share)
	}
	if share := float64(decoys) / float64(faults); share < 0.15 || share > 0.35 {
		t.Errorf("%d of %d fault cases have a decoy (%.2f), want about 0.25", decoys, faults, share)
	}
	if tp1 == 0 || tpN == 0 {
		t.Errorf("models at tp 1: %d, at tp 2/4: %d; want both", tp1, tpN)
	}
}

// Every cause, at every target kind it accepts, and every decoy kind is
// drawn within the seeds.
func TestRandomCaseReachesEveryCause(t *testing.T) {
	seen := map[string]int{}
	decoys := map[string]int{}
	for _, c := range randomCases(t, RandomOptions{}) {
		for _, f := range c.Config.Scenario.Faults {
			seen[f.Cause+"@"+kindOfTarget(f.Target)]++
			seen[f.Cause]++
		}
		for _, d := range c.Config.Scenario.Decoys {
			decoys[d.Kind]++
		}
	}
	for _, c := range Causes() {
		if seen[c.ID] < 15 {
			t.Errorf("%s drawn %d times in %d seeds, want about %d", c.ID, seen[c.ID], randomSeeds, randomSeeds*9/10/len(causes))
		}
		for _, k := range c.Targets {
			if seen[c.ID+"@"+k] == 0 {
				t.Errorf("%s never drawn at a %s target", c.ID, k)
			}
		}
	}
	for _, d := range DecoyKinds() {
		if decoys[d.ID] == 0 {
			t.Errorf("decoy %s never drawn", d.ID)
		}
	}
}

// A seed alone fixes the case, and the options move the window without
// changing what is drawn.
func TestRandomCaseDeterministic(t *testing.T) {
	for s := uint64(1); s <= 60; s++ {
		a, err := RandomCase(s, RandomOptions{Window: 20 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := RandomCase(s, RandomOptions{Window: 20 * time.Minute})
		if !reflect.DeepEqual(a.Config, b.Config) || !reflect.DeepEqual(a.Load, b.Load) {
			t.Fatalf("seed %d: two draws differ:\n%s\n%s", s, a.Summary(), b.Summary())
		}
		h, err := RandomCase(s, RandomOptions{Window: 10 * time.Minute, HealthyPrefix: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.Config.Fleet, h.Config.Fleet) || a.Config.VLLMScrapeInterval != h.Config.VLLMScrapeInterval ||
			a.Config.DCGMScrapeInterval != h.Config.DCGMScrapeInterval || a.FaultFree != h.FaultFree {
			t.Fatalf("seed %d: the healthy-prefix draw has another fleet:\n%s\n%s", s, a.Summary(), h.Summary())
		}
		if h.Config.Duration != 20*time.Minute || h.Prefix != 10*time.Minute {
			t.Errorf("seed %d: healthy-prefix run of %v with prefix %v", s, h.Config.Duration, h.Prefix)
		}
		fa, fh := a.Config.Scenario.Faults, h.Config.Scenario.Faults
		if len(fa) != len(fh) {
			t.Fatalf("seed %d: %d faults against %d", s, len(fa), len(fh))
		}
		for i := range fa {
			if fa[i].Cause != fh[i].Cause || fa[i].Target != fh[i].Target || fa[i].Magnitude != fh[i].Magnitude {
				t.Errorf("seed %d: fault %+v against %+v", s, fa[i], fh[i])
			}
			// Same place in the window (half as long), after the prefix.
			onA, _ := parseOffset(fa[i].Onset, 20*time.Minute)
			onH, _ := parseOffset(fh[i].Onset, 20*time.Minute)
			if d := (onH - 10*time.Minute) - onA/2; d < -time.Second || d > time.Second {
				t.Errorf("seed %d: onset %v in the whole-run case, %v after the prefix", s, onA, onH)
			}
		}
		for _, d := range h.Config.Scenario.Decoys {
			if on, _ := parseOffset(d.Onset, 20*time.Minute); on < 10*time.Minute {
				t.Errorf("seed %d: decoy %s starts at %v, in the healthy prefix", s, d.Kind, on)
			}
		}
	}
}

// The cases are valid scenario files as well: their JSON passes the strict
// parser with the fleet inside.
func TestRandomCaseParses(t *testing.T) {
	for s := uint64(1); s <= 40; s++ {
		c, err := RandomCase(s, RandomOptions{Window: 30 * time.Minute, HealthyPrefix: 15 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		sc := *c.Config.Scenario
		fl := c.Config.Fleet
		sc.Fleet = &fl
		sc.Duration = c.Config.Duration.String()
		b, err := json.Marshal(sc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseScenario(fmt.Sprintf("random-%d.json", s), b); err != nil {
			t.Errorf("seed %d: %v\n%s", s, err, b)
		}
	}
}

func TestRandomCaseOptions(t *testing.T) {
	for _, o := range []RandomOptions{{Window: time.Minute}, {HealthyPrefix: -time.Minute}, {Window: 48 * time.Hour}} {
		if _, err := RandomCase(1, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	for s := uint64(1); s <= 50; s++ {
		c, _ := RandomCase(s, RandomOptions{FaultFree: -1, Decoy: -1})
		if c.FaultFree || len(c.Config.Scenario.Decoys) > 0 {
			t.Errorf("seed %d: fault-free %v, %d decoys with both off", s, c.FaultFree, len(c.Config.Scenario.Decoys))
		}
	}
}

// Screen leaves a case whose fault shows in its own entity's P99, or says
// it is weak; the effect it reports is the one a run of the case has.
func TestRandomScreen(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates")
	}
	n := 0
	for s := uint64(1); n < 3; s++ {
		c, err := RandomCase(s, RandomOptions{Window: 10 * time.Minute, FaultFree: -1})
		if err != nil {
			t.Fatal(err)
		}
		if c.Config.Fleet.Models[0].Rate*float64(len(c.Config.Fleet.Models)) > 20 {
			continue // keep the test quick
		}
		n++
		screened, err := Screen(context.Background(), c, 1.3, 4)
		if err != nil {
			t.Fatal(err)
		}
		ef := screened.Faults[0].Effect
		if c.Screened < 1 || (!c.Weak && ef.P99Ratio < 1.3) {
			t.Errorf("seed %d: %d simulations, weak %v, ratio %v", s, c.Screened, c.Weak, ef.P99Ratio)
		}
		tr, err := Run(context.Background(), c.Config, discardSink{})
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Faults[0].Effect; *got != *ef || tr.Stats.Requests != screened.Stats.Requests {
			t.Errorf("seed %d: run effect %+v and %d requests, screened %+v and %d", s, got, tr.Stats.Requests, ef, screened.Stats.Requests)
		}
	}
}

// engineCapacity holds what the simulator does: one engine serving the
// reference mix at its tabled capacity has a median e2e latency about 1.5×
// (1.2–2×) its median at a tenth of it.
func TestRandomCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates")
	}
	keys := make([]string, 0, len(engineCapacity))
	for k := range engineCapacity {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var arch, gpu string
		var tp int
		for i, c := range k {
			if c == '/' {
				arch = k[:i]
				fmt.Sscanf(k[i+1:], "%4s/%d", &gpu, &tp)
				break
			}
		}
		med := func(rate float64) float64 {
			cfg := DefaultConfig()
			cfg.Fleet = FleetSpec{Hosts: []HostSpec{{Name: "h", GPU: gpu, GPUs: 4}}, Models: []ModelSpec{{
				Name: arch, Engines: 1, TP: tp, Rate: rate,
				Workload: []StreamSpec{{Trace: "azure-conv", Share: 0.7}, {Trace: "azure-code", Share: 0.3}},
			}}}
			cfg.Duration = 8 * time.Minute
			capt, _ := runCapture(t, cfg)
			return median(field(capt.window("", time.Minute, 8*time.Minute), e2eOf))
		}
		c := engineCapacity[k]
		idle, at := med(c/10), med(c)
		if r := at / idle; r < 1.2 || r > 2 {
			t.Errorf("%s: median e2e %.2fs at %.1f req/s, %.2fs at a tenth: %.2f×, want about 1.5×", k, at, c, idle, r)
		}
	}
}
