package faultlab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// RandomOptions shape the cases RandomCase draws. The options change where
// the question window sits in the run (and Router, how requests are
// routed), never what is drawn: the same seed gives the same fleet, fault
// (cause, target, magnitude, onset and duration relative to the window)
// and decoys whatever the options.
type RandomOptions struct {
	// Window is the part of the run a question covers (default 30m). The
	// fault's onset falls in 10–60% of it.
	Window time.Duration
	// HealthyPrefix is fault-free time simulated before the window, so that
	// a question about the window has healthy data before it (zero: none;
	// the run is the window). No fault or decoy acts in it.
	HealthyPrefix time.Duration
	// FaultFree is the probability that a case has no fault (zero: 0.1;
	// negative: never).
	FaultFree float64
	// Decoy is the probability that a fault case also gets a decoy (zero:
	// 0.25; negative: never). Fault-free cases get load swings instead.
	Decoy float64
	// Router is the routers' policy (Config.Router; zero: round-robin), or
	// RouterMixed: one of the policies drawn per seed, from a stream of its
	// own. Unlike the other options it changes the physics (where requests
	// go), not the draws: the fleet, fault and decoys are those of the
	// seed, though Screen may strengthen the fault differently.
	Router RouterPolicy
}

// RouterMixed asks RandomCase to draw each seed's router policy.
const RouterMixed RouterPolicy = "mixed"

func (o RandomOptions) resolved() RandomOptions {
	if o.Window == 0 {
		o.Window = 30 * time.Minute
	}
	if o.FaultFree == 0 {
		o.FaultFree = 0.1
	}
	if o.Decoy == 0 {
		o.Decoy = 0.25
	}
	return o
}

// Case is one randomly drawn run: a fleet, its load, scrape intervals and
// at most one fault (plus decoys), as a Config ready to Run.
type Case struct {
	Seed uint64
	// Config runs the case: Seed, Duration (prefix + window), Fleet,
	// scrape intervals, step-span share and Scenario (faults, decoys). The
	// caller may set Start.
	Config Config
	// Prefix is the healthy time before the window; the window is
	// [Prefix, Prefix+Window) from the run's start.
	Prefix, Window time.Duration
	// Load is each model's drawn load: its request rate over the capacity
	// of its engines (about 1 where the median latency has grown by half).
	Load map[string]float64
	// FaultFree: no fault was drawn (Scenario.Faults is empty).
	FaultFree bool
	// Screened is the number of in-memory simulations Screen ran; Weak says
	// that no draw it tried made the fault show in its own entity's P99.
	Screened int
	Weak     bool

	plan  *fleetPlan
	fault *faultDraw
	opts  RandomOptions
}

// Summary is a one-line description of the case.
func (c *Case) Summary() string {
	var b strings.Builder
	fl := c.Config.Fleet
	gpus := 0
	for _, h := range fl.Hosts {
		gpus += h.GPUs
	}
	fmt.Fprintf(&b, "%d hosts/%d GPUs;", len(fl.Hosts), gpus)
	for _, m := range fl.Models {
		fmt.Fprintf(&b, " %s %d×tp%d %.1f/s (load %.2f);", m.Name, m.Engines, m.TP, m.Rate, c.Load[m.Name])
	}
	fmt.Fprintf(&b, " scrape %v/%v;", c.Config.VLLMScrapeInterval, c.Config.DCGMScrapeInterval)
	if r := c.Config.Router; r != "" && r != RouteRoundRobin {
		fmt.Fprintf(&b, " router %s;", r)
	}
	if c.Config.DCGMDefaultFields {
		b.WriteString(" dcgm default fields (no clock-event reasons);")
	}
	sc := c.Config.Scenario
	if len(sc.Faults) == 0 {
		b.WriteString(" no fault")
	}
	for _, f := range sc.Faults {
		fmt.Fprintf(&b, " %s on %s m=%.3g at %s for %s", f.Cause, targetString(f.Target), f.Magnitude, f.Onset, f.Duration)
	}
	for _, d := range sc.Decoys {
		fmt.Fprintf(&b, "; decoy %s on %s m=%.3g", d.Kind, targetString(d.Target), d.Magnitude)
	}
	return b.String()
}

func targetString(t Target) string {
	for _, kv := range [][2]string{{"host", t.Host}, {"gpu", t.GPU}, {"pod", t.Pod + t.Engine}, {"model", t.Model}} {
		if kv[1] != "" {
			return kv[0] + "=" + kv[1]
		}
	}
	return "?"
}

// engineCapacity is one engine's request rate (req/s) at which its median
// e2e latency has grown to about 1.5× its median when idle, serving the
// reference mix (Azure conversation 70%, code 30%, no system prompt), per
// model architecture, GPU kind and tensor-parallel degree. Measured with
// the simulator itself (TestRandomCapacity checks every entry); a missing
// entry is a combination RandomCase does not deploy (the weights do not fit,
// or leave too little KV cache to serve).
var engineCapacity = map[string]float64{
	"llama-3.1-8b/H100/1": 5.5, "llama-3.1-8b/H100/2": 11, "llama-3.1-8b/H100/4": 18,
	"llama-3.1-8b/H200/1": 5.5, "llama-3.1-8b/H200/2": 11, "llama-3.1-8b/H200/4": 18,
	"mistral-7b/H100/1": 6, "mistral-7b/H100/2": 12, "mistral-7b/H100/4": 18,
	"mistral-7b/H200/1": 6.5, "mistral-7b/H200/2": 12, "mistral-7b/H200/4": 18,
	"qwen2.5-32b/H200/1": 1.3,
	"qwen2.5-32b/H100/2": 2.4, "qwen2.5-32b/H200/2": 2.4,
	"qwen2.5-32b/H100/4": 4.5, "qwen2.5-32b/H200/4": 4.5,
	"llama-3.1-70b/H200/2": 1.2,
	"llama-3.1-70b/H100/4": 2.2, "llama-3.1-70b/H200/4": 2.4,
}

func capacityKey(arch, gpu string, tp int) string { return arch + "/" + gpu + "/" + strconv.Itoa(tp) }

// Random-case bounds.
const (
	randMinHosts, randMaxHosts = 2, 8
	randMaxGPUsPerHost         = 8
	randMaxModels              = 3
	// randMinModelRate: every model serves enough requests for a P99 in a
	// few minutes.
	randMinModelRate = 3.0
	// randMinLoad and randMaxLoad bound a model's load (rate / capacity):
	// engines neither idle nor overloaded.
	randMinLoad, randMaxLoad = 0.3, 0.75
	// randMaxFleetRate bounds the fleet's total request rate, so that a
	// run stays cheap to simulate, ingest and rank; fleets of many small
	// engines are drawn with fewer GPUs in use or larger models instead.
	randMaxFleetRate = 70.0
)

// RandomCase draws one case from seed. Everything is a function of seed
// (and of opts only for the window's placement); the case is validated by
// the lab's own scenario validation.
func RandomCase(seed uint64, opts RandomOptions) (*Case, error) {
	o := opts.resolved()
	if o.Window < 2*time.Minute || o.Window > 24*time.Hour {
		return nil, fmt.Errorf("random case: window %v not in [2m, 24h]", o.Window)
	}
	if o.HealthyPrefix < 0 || o.HealthyPrefix > 24*time.Hour {
		return nil, fmt.Errorf("random case: healthy prefix %v not in [0, 24h]", o.HealthyPrefix)
	}
	// Independent streams for independent parts, so that changing how one
	// part is drawn does not reshuffle the others.
	rng := func(part uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, mix3(0x7a11ca5e, part, 1))) }
	fr := rng(1)
	var plan *fleetPlan
	var err error
	for attempt := 0; attempt < 200; attempt++ {
		plan, err = drawFleet(fr)
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("random case %d: no fleet after 200 draws: %w", seed, err)
	}
	c := &Case{Seed: seed, Prefix: o.HealthyPrefix, Window: o.Window, Load: plan.load}
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.Fleet = plan.spec
	cfg.Duration = o.HealthyPrefix + o.Window
	sr := rng(2)
	cfg.VLLMScrapeInterval = time.Duration(5+sr.IntN(11)) * time.Second
	cfg.DCGMScrapeInterval = time.Duration(10+sr.IntN(21)) * time.Second
	cfg.StepSpanShare = []float64{0, 0.05, 0.1}[sr.IntN(3)]
	// Half the fleets run dcgm-exporter with its default field set (no
	// clock-event reasons), as many operators do; a stream of its own, so
	// that the other draws of a seed stay what they were.
	cfg.DCGMDefaultFields = rng(7).IntN(2) == 0
	cfg.Router = o.Router
	if o.Router == RouterMixed {
		ps := RouterPolicies()
		cfg.Router = ps[rng(8).IntN(len(ps))]
	}

	sc := &Scenario{Name: fmt.Sprintf("random-%d", seed), Faults: []FaultSpec{}}
	kr := rng(3)
	faultFree := o.FaultFree > 0 && kr.Float64() < o.FaultFree
	wantDecoy := o.Decoy > 0 && kr.Float64() < o.Decoy
	causeIdx := kr.IntN(len(causes))
	c.plan, c.opts = plan, o
	if faultFree {
		c.FaultFree = true
		sc.Description = "no fault; natural load swings"
		sc.Decoys = loadSwings(rng(4), plan, o)
	} else {
		d, err := drawFault(rng(5), causes[causeIdx], plan, o)
		if err != nil {
			return nil, fmt.Errorf("random case %d: %w", seed, err)
		}
		c.fault = d
		fs := d.spec(plan)
		sc.Faults = append(sc.Faults, fs)
		sc.Description = d.note(fs)
		if wantDecoy {
			if ds, ok := drawDecoy(rng(6), plan, fs, o); ok {
				sc.Decoys = append(sc.Decoys, ds)
			}
		}
	}
	// drawFault may have given the target model a system prompt.
	cfg.Fleet = plan.spec
	cfg.Scenario = sc
	if err := sc.Validate(cfg.Fleet, cfg.Duration); err != nil {
		return nil, fmt.Errorf("random case %d: %w", seed, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("random case %d: %w", seed, err)
	}
	c.Config = cfg
	return c, nil
}

// fleetPlan is a drawn fleet with what the fault draws need to know.
type fleetPlan struct {
	spec  FleetSpec
	fleet *fleet
	load  map[string]float64
	// capacity of each model's engines in total, req/s.
	capacity map[string]float64
}

// drawFleet draws hosts, models, placement and rates; an error means "draw
// again" (the draw did not give every model enough capacity, or the fleet
// would be too expensive to run).
func drawFleet(r *rand.Rand) (*fleetPlan, error) {
	kinds := GPUKinds()
	nHosts := randMinHosts + r.IntN(randMaxHosts-randMinHosts+1)
	// Half the fleets are one node type throughout, as a node pool is; the
	// rest mix GPU kinds and sizes host by host.
	uniform := r.IntN(2) == 0
	kind0, n0 := kinds[r.IntN(len(kinds))].Name, 1+r.IntN(randMaxGPUsPerHost)
	hosts := make([]HostSpec, nHosts)
	for i := range hosts {
		k, n := kind0, n0
		if !uniform {
			k, n = kinds[r.IntN(len(kinds))].Name, 1+r.IntN(randMaxGPUsPerHost)
		}
		hosts[i] = HostSpec{Name: "node-" + strconv.Itoa(i+1), GPU: k, GPUs: n}
	}
	archs := ModelArchs()
	nModels := 1 + r.IntN(randMaxModels)
	perm := r.Perm(len(archs))[:nModels]
	// Hosts in a random order, some split into two halves; the sequence of
	// hosts and halves is cut into one consecutive group per model, so a
	// split host serves two models.
	type seg struct {
		host     int
		from, to int // GPU indices [from, to)
	}
	var units []seg
	for _, hi := range r.Perm(nHosts) {
		n := hosts[hi].GPUs
		if n >= 2 && r.IntN(4) == 0 {
			units = append(units, seg{hi, 0, n / 2}, seg{hi, n / 2, n})
			continue
		}
		units = append(units, seg{hi, 0, n})
	}
	if len(units) < nModels {
		return nil, errors.New("fewer hosts and halves than models")
	}
	cuts := r.Perm(len(units) - 1)[:nModels-1]
	for i := range cuts {
		cuts[i]++
	}
	slices.Sort(cuts)
	cuts = append(append([]int{0}, cuts...), len(units))
	segs := make([][]seg, nModels)
	for m := range segs {
		segs[m] = units[cuts[m]:cuts[m+1]]
	}
	spec := FleetSpec{Namespace: "llm-serving", Hosts: hosts}
	occupied := make([][]bool, nHosts)
	for i := range occupied {
		occupied[i] = make([]bool, hosts[i].GPUs)
	}
	plan := &fleetPlan{load: map[string]float64{}, capacity: map[string]float64{}}
	var totalRate float64
	for mi := 0; mi < nModels; mi++ {
		arch := archs[perm[mi]].Name
		if len(segs[mi]) == 0 {
			return nil, errors.New("a model got no GPUs")
		}
		// The TP degrees this model can run at on its GPUs; prefer
		// engines of one GPU (pods) when the model fits one.
		var tps []int
		for _, tp := range []int{1, 2, 4} {
			ok := true
			for _, s := range segs[mi] {
				if _, known := engineCapacity[capacityKey(arch, hosts[s.host].GPU, tp)]; !known {
					ok = false
				}
			}
			if ok && slices.ContainsFunc(segs[mi], func(s seg) bool { return s.to-s.from >= tp }) {
				tps = append(tps, tp)
			}
		}
		if len(tps) == 0 {
			return nil, fmt.Errorf("%s fits none of its hosts", arch)
		}
		tp := tps[0]
		if len(tps) > 1 && r.IntN(3) == 0 {
			tp = tps[1+r.IntN(len(tps)-1)]
		}
		ms := ModelSpec{Name: arch, TP: tp, MaxBatchedTokens: 2048}
		capTotal := 0.0
		for _, s := range segs[mi] {
			h := hosts[s.host]
			placed := 0
			// The lab places engines first-fit on aligned runs (freeRun);
			// count what it will place inside this segment.
			for start := 0; start+tp <= h.GPUs; start += tp {
				if start < s.from || start+tp > s.to {
					continue
				}
				free := true
				for g := start; g < start+tp; g++ {
					free = free && !occupied[s.host][g]
				}
				if !free {
					continue
				}
				for g := start; g < start+tp; g++ {
					occupied[s.host][g] = true
				}
				placed++
			}
			if placed == 0 {
				continue
			}
			if !slices.Contains(ms.Hosts, h.Name) {
				ms.Hosts = append(ms.Hosts, h.Name)
			}
			ms.Engines += placed
			capTotal += float64(placed) * engineCapacity[capacityKey(arch, h.GPU, tp)]
		}
		if ms.Engines == 0 {
			return nil, fmt.Errorf("%s: no engine fits its GPUs at tp %d", arch, tp)
		}
		mix := drawMix(r)
		ms.Workload = mix.streams
		c := capTotal * mix.capFactor
		lo := max(randMinLoad, randMinModelRate/c)
		if lo > randMaxLoad {
			return nil, fmt.Errorf("%s: capacity %.1f req/s cannot serve %.0f req/s", arch, c, randMinModelRate)
		}
		u := lo + r.Float64()*(randMaxLoad-lo)
		ms.Rate = round3(u * c)
		totalRate += ms.Rate
		plan.load[arch] = round3(ms.Rate / c)
		plan.capacity[arch] = c
		spec.Models = append(spec.Models, ms)
	}
	if totalRate > randMaxFleetRate {
		return nil, fmt.Errorf("fleet rate %.0f req/s over %.0f", totalRate, randMaxFleetRate)
	}
	// The lab places in model order, first fit: the counts above are what
	// it places only if the models' host lists do not overlap earlier than
	// the plan says. Check by building the fleet.
	f, err := buildFleet(spec, 0)
	if err != nil {
		return nil, err
	}
	for i, ms := range spec.Models {
		if len(f.models[i].engines) != ms.Engines {
			return nil, fmt.Errorf("%s: placed %d engines, planned %d", ms.Name, len(f.models[i].engines), ms.Engines)
		}
	}
	plan.spec, plan.fleet = spec, f
	return plan, nil
}

type workloadMix struct {
	streams []StreamSpec
	// capFactor scales the reference capacity for this mix.
	capFactor float64
}

// drawMix draws a model's traffic: the Azure conversation and code traces
// in one of a few proportions, sometimes behind a deployment system prompt.
func drawMix(r *rand.Rand) workloadMix {
	conv := []float64{1, 0.8, 0.7, 0.5}[r.IntN(4)]
	var st []StreamSpec
	st = append(st, StreamSpec{Trace: "azure-conv", Share: conv})
	if conv < 1 {
		st = append(st, StreamSpec{Trace: "azure-code", Share: round3(1 - conv)})
	}
	f := 1.0
	// Code prompts are longer (median 1.5k against 1k tokens) and answers
	// shorter: about the same work per request.
	if r.IntN(4) == 0 {
		sys := []int{1024, 2048}[r.IntN(2)]
		for i := range st {
			st[i].SystemPromptTokens = sys
		}
		f = sysPromptCapFactor
	}
	return workloadMix{streams: st, capFactor: f}
}

// sysPromptCapFactor is the capacity of an engine behind a system prompt
// against the reference mix: mostly prefix-cache hits, a little more KV and
// prefill.
const sysPromptCapFactor = 0.85

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// targetsOf lists the targets of a kind in the fleet, in fleet order.
func targetsOf(kind string, f *fleet) []Target {
	var out []Target
	switch kind {
	case "model":
		for _, m := range f.models {
			out = append(out, Target{Model: m.spec.Name})
		}
	case "engine":
		for _, e := range f.engines {
			out = append(out, Target{Pod: e.pod})
		}
	case "gpu":
		for _, g := range f.gpus {
			if g.engine != nil {
				out = append(out, Target{GPU: g.host.name + "/" + strconv.Itoa(g.local)})
			}
		}
	case "host":
		for _, h := range f.hosts {
			if len(h.engines) > 0 {
				out = append(out, Target{Host: h.name})
			}
		}
	}
	return out
}

// magRange is a cause's magnitude range, from where the fault barely shows
// in its own entity's P99 to a strong fault, drawn log-uniformly. Measured
// with the simulator (TestRandomMagnitudes): at the low end the target
// entity's P99 e2e over the fault is about 1.3× its healthy P99, at the high
// end several times it. queue.saturation is set from the model's load
// instead (drawFault).
var magRange = map[string][2]float64{
	"kv_cache.preemption":         {0.965, 0.995},
	"workload.long_prompts":       {0.4, 2},
	"workload.long_outputs":       {0.3, 2.5},
	"prefix_cache.miss":           {0.6, 1},
	"engine.prefill_interference": {2, 15},
	"gpu.thermal_throttle":        {0.8, 2.2},
	"gpu.power_cap":               {0.6, 0.92},
	"gpu.xid_error":               {0.15, 1.5},
	"gpu.pcie_contention":         {0.8, 0.97},
	"gpu.memory_bandwidth":        {0.35, 0.85},
	"entity.degraded":             {0.3, 2.5},
}

// offset renders a time from the run's start as a scenario duration.
func offset(d time.Duration) string { return d.Round(time.Second).String() }

// faultTiming draws onset (10–60% of the window) and duration (to the end
// of the run a quarter of the time, else 20–60% of the window, ending by
// the window's end), as offsets from the run's start.
func faultTiming(r *rand.Rand, o RandomOptions) (onset, dur time.Duration) {
	w := float64(o.Window)
	on := time.Duration((0.1 + 0.5*r.Float64()) * w)
	rest := o.Window - on
	d := rest
	if r.IntN(4) != 0 {
		d = min(rest, time.Duration((0.2+0.4*r.Float64())*w))
	}
	return o.HealthyPrefix + on, d
}

// faultDraw is a drawn fault: its cause, the candidate targets of the
// drawn kind (in a drawn order; the first is used, Screen moves on), its
// strength (0: barely, 1: strong) and its timing.
type faultDraw struct {
	cause   Cause
	kind    string
	targets []Target
	ti      int
	u       float64
	onset   time.Duration
	dur     time.Duration
	xid     int
	brake   bool
}

// drawFault draws the target, strength and timing of one fault of cause c.
func drawFault(r *rand.Rand, c Cause, plan *fleetPlan, o RandomOptions) (*faultDraw, error) {
	f := plan.fleet
	cands := func(kind string) []Target {
		ts := targetsOf(kind, f)
		switch {
		case c.ID == "queue.saturation" && kind == "engine":
			// Forcing traffic onto one engine needs peers to take it from.
			ts = slices.DeleteFunc(ts, func(t Target) bool { return len(f.engineByPod(t.Pod).m.engines) < 2 })
		case c.ID == "entity.degraded" && kind == "gpu":
			// A slow GPU with no measured mechanism slows its engine, and
			// nothing tells it from the engine's other GPUs: a GPU target
			// is a GPU of its own, the whole of a one-GPU pod.
			ts = slices.DeleteFunc(ts, func(t Target) bool { return len(f.gpuByRef(t.GPU).engine.gpus) > 1 })
		case c.ID == "prefix_cache.miss":
			// Losing the prefix cache matters where prompts share prefixes:
			// models behind a deployment system prompt.
			ts = slices.DeleteFunc(ts, func(t Target) bool { return !hasSystemPrompt(plan, targetModel(f, t)) })
		case c.ID == "engine.prefill_interference":
			// Long prompts pinned to one engine show where there are long
			// prompts (the code trace: 12% of prompts over 4.6k tokens,
			// the chat trace 0.6%) and peers they are taken from.
			if k := slices.DeleteFunc(slices.Clone(ts), func(t Target) bool { return !longContextTenant(plan, targetModel(f, t)) }); len(k) > 0 {
				ts = k
			}
		}
		return ts
	}
	if c.ID == "prefix_cache.miss" && !slices.ContainsFunc(plan.spec.Models, func(ms ModelSpec) bool { return hasSystemPrompt(plan, ms.Name) }) {
		// No model has one: the busiest model serves an agent platform.
		busiest := 0
		for i, ms := range plan.spec.Models {
			if ms.Rate > plan.spec.Models[busiest].Rate {
				busiest = i
			}
		}
		giveSystemPrompt(plan, busiest, []int{1024, 2048}[r.IntN(2)])
	}
	var kinds []string
	for _, k := range c.Targets {
		if len(cands(k)) > 0 {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("%s: no target in this fleet", c.ID)
	}
	d := &faultDraw{cause: c, kind: kinds[r.IntN(len(kinds))]}
	ts := cands(d.kind)
	r.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	d.targets = ts
	d.u = r.Float64()
	d.onset, d.dur = faultTiming(r, o)
	if c.ID == "gpu.xid_error" {
		d.xid = []int{13, 31, 43, 48, 79}[r.IntN(5)]
	}
	d.brake = c.ID == "gpu.power_cap" && r.IntN(4) == 0
	return d, nil
}

func targetModel(f *fleet, t Target) string {
	rt, err := resolveTarget(f, t, []string{"model", "host", "gpu", "engine"})
	if err != nil || rt.model == nil {
		return ""
	}
	return rt.model.spec.Name
}

// longContextTenant says whether a model has peers to pin long prompts
// away from and a share of code traffic with long prompts.
func longContextTenant(plan *fleetPlan, model string) bool {
	for i, ms := range plan.spec.Models {
		if ms.Name != model {
			continue
		}
		code := 0.0
		for _, st := range ms.Workload {
			if st.Trace == "azure-code" {
				code += st.Share
			}
		}
		return len(plan.fleet.models[i].engines) >= 2 && code >= 0.2
	}
	return false
}

func hasSystemPrompt(plan *fleetPlan, model string) bool {
	for _, ms := range plan.spec.Models {
		if ms.Name == model {
			return ms.Workload[0].SystemPromptTokens > 0
		}
	}
	return false
}

// giveSystemPrompt puts a system prompt in front of every stream of model
// i, lowering its rate as much as its capacity falls (drawMix), but not
// below randMinModelRate (its load then rises by up to 1/sysPromptCapFactor).
func giveSystemPrompt(plan *fleetPlan, i, tokens int) {
	ms := &plan.spec.Models[i]
	ws := slices.Clone(ms.Workload)
	for j := range ws {
		ws[j].SystemPromptTokens = tokens
	}
	ms.Workload = ws
	ms.Rate = max(randMinModelRate, round3(ms.Rate*sysPromptCapFactor))
	plan.capacity[ms.Name] *= sysPromptCapFactor
	plan.load[ms.Name] = round3(ms.Rate / plan.capacity[ms.Name])
	plan.fleet.models[i].spec.Workload, plan.fleet.models[i].spec.Rate = ms.Workload, ms.Rate
}

// logInterp is lo·(hi/lo)^u.
func logInterp(lo, hi, u float64) float64 {
	return math.Exp(math.Log(lo) + u*(math.Log(hi)-math.Log(lo)))
}

// spec is the fault as a scenario entry.
func (d *faultDraw) spec(plan *fleetPlan) FaultSpec {
	f := plan.fleet
	t := d.targets[d.ti]
	c := d.cause
	fs := FaultSpec{Cause: c.ID, Target: t, Onset: offset(d.onset), Duration: offset(d.dur), XID: d.xid, Brake: d.brake}
	switch c.ID {
	case "queue.saturation":
		// Arrivals over the engines' capacity by a factor from 0.95
		// (queues barely form) to 2.2 (a surge).
		x := logInterp(0.95, 2.2, d.u)
		if d.kind == "model" {
			fs.Magnitude = max(0.1, x/plan.load[t.Model]-1)
		} else {
			e := f.engineByPod(t.Pod)
			m := e.m
			ce := engineCapacity[capacityKey(m.spec.Name, e.host.kind.Name, m.spec.TP)]
			// The forced share s of the model's traffic puts s·rate on
			// an engine of capacity ce; at least 1.5× its fair share.
			fs.Magnitude = math.Min(1, math.Max(x*ce/m.spec.Rate, 1.5/float64(len(m.engines))))
		}
	case "kv_cache.preemption", "gpu.pcie_contention":
		// Near-1 magnitudes: the strength is in what is left, 1 − m.
		mr := magRange[c.ID]
		fs.Magnitude = 1 - logInterp(1-mr[0], 1-mr[1], d.u)
	default:
		mr := magRange[c.ID]
		fs.Magnitude = logInterp(mr[0], mr[1], d.u)
	}
	fs.Magnitude = math.Min(c.MagMax, math.Max(fs.Magnitude, c.MagMin+1e-4))
	fs.Magnitude = math.Round(fs.Magnitude*1e4) / 1e4
	return fs
}

func (d *faultDraw) note(fs FaultSpec) string {
	return fmt.Sprintf("%s on %s, magnitude %.4g (%s)", fs.Cause, targetString(fs.Target), fs.Magnitude, d.cause.Magnitude)
}

// drawDecoy draws one harmless movement on an entity other than the
// fault's, starting near the fault's onset.
func drawDecoy(r *rand.Rand, plan *fleetPlan, fault FaultSpec, o RandomOptions) (DecoySpec, bool) {
	kinds := DecoyKinds()
	k := kinds[r.IntN(len(kinds))]
	f := plan.fleet
	var cands []Target
	for _, kind := range k.Targets {
		for _, t := range targetsOf(kind, f) {
			if overlaps(f, t, fault.Target) {
				continue
			}
			if k.ID == "workload.rate_swing" && plan.load[t.Model]*1.3 > 0.85 {
				continue // a swing must stay well within capacity
			}
			cands = append(cands, t)
		}
	}
	if len(cands) == 0 {
		return DecoySpec{}, false
	}
	t := cands[r.IntN(len(cands))]
	on, _ := parseOffset(fault.Onset, o.HealthyPrefix+o.Window)
	shift := time.Duration((r.Float64()*0.2 - 0.1) * float64(o.Window))
	on = min(max(o.HealthyPrefix, on+shift), o.HealthyPrefix+o.Window-time.Minute)
	d := time.Duration((0.2 + 0.4*r.Float64()) * float64(o.Window))
	d = min(d, o.HealthyPrefix+o.Window-on)
	ds := DecoySpec{Kind: k.ID, Target: t, Onset: offset(on), Duration: offset(d)}
	switch k.ID {
	case "gpu.temperature":
		ds.Magnitude = 4 + r.Float64()*10
	case "gpu.pcie_traffic":
		ds.Magnitude = 0.1 + r.Float64()*0.3
	case "workload.rate_swing":
		u := plan.load[t.Model]
		ds.Magnitude = math.Min(0.3, 0.85/u-1) * (0.5 + 0.5*r.Float64())
	}
	ds.Magnitude = math.Round(ds.Magnitude*1e4) / 1e4
	return ds, true
}

// loadSwings are the natural load changes of a fault-free run: one or two
// models' traffic rises by up to 30% for a while, within capacity.
func loadSwings(r *rand.Rand, plan *fleetPlan, o RandomOptions) []DecoySpec {
	var out []DecoySpec
	for _, ms := range plan.spec.Models {
		u := plan.load[ms.Name]
		if r.IntN(2) == 0 || u*1.1 > 0.85 {
			continue
		}
		on, d := faultTiming(r, o)
		m := math.Min(0.3, 0.85/u-1) * (0.4 + 0.6*r.Float64())
		out = append(out, DecoySpec{
			Kind: "workload.rate_swing", Target: Target{Model: ms.Name}, Onset: offset(on), Duration: offset(d),
			Magnitude: math.Round(m*1e4) / 1e4, Note: "traffic rises within capacity",
		})
	}
	return out
}

// overlaps says whether two targets share an engine.
func overlaps(f *fleet, a, b Target) bool {
	ra, err1 := resolveTarget(f, a, []string{"model", "host", "gpu", "engine"})
	rb, err2 := resolveTarget(f, b, []string{"model", "host", "gpu", "engine"})
	if err1 != nil || err2 != nil {
		return true
	}
	for _, e := range ra.engines {
		if slices.Contains(rb.engines, e) {
			return true
		}
	}
	for _, g := range ra.gpus {
		if slices.Contains(rb.gpus, g) {
			return true
		}
	}
	return false
}

// Screen makes sure the fault of a case shows in its own entity's P99. It
// simulates the case in memory (a run is deterministic, so the effect is
// the one the real run will have) and, while the P99 of the e2e latency of
// the fault's engines during the fault is below minRatio times their P99
// before it, strengthens the fault halfway to the strong end of its range,
// or moves it to the next candidate target once it is strong already: at
// most maxSims simulations, after which the case keeps its last draw and
// is marked Weak. The strength a cause needs depends on the fleet (a KV
// cache lost on an idle engine, a long-context tenant pinned to a model's
// only engine hardly show), which the magnitude ranges alone cannot know.
// A fault-free case is returned unchanged. It returns the truth of the
// case as it now stands (nil for a fault-free case, which it does not
// simulate): the truth of any run of it, the fault's effect included.
func Screen(ctx context.Context, c *Case, minRatio float64, maxSims int) (*Truth, error) {
	if c.FaultFree || c.fault == nil {
		return nil, nil
	}
	d := c.fault
	for sim := 1; ; sim++ {
		tr, err := Simulate(ctx, c.Config)
		c.Screened = sim
		if err != nil {
			return nil, fmt.Errorf("screen case %d: %w", c.Seed, err)
		}
		ef := tr.Faults[0].Effect
		if ef != nil && ef.P99Ratio >= minRatio {
			c.Weak = false
			return tr, nil
		}
		if sim >= maxSims {
			c.Weak = true
			return tr, nil
		}
		switch {
		case d.u < 0.95:
			d.u += (1 - d.u) * 0.6
		case len(d.targets) > 1:
			d.ti = (d.ti + 1) % len(d.targets)
			d.u = 0.5
		default:
			d.u = 1
		}
		sc := *c.Config.Scenario
		fs := d.spec(c.plan)
		sc.Faults = []FaultSpec{fs}
		sc.Description = d.note(fs)
		sc.Decoys = slices.DeleteFunc(slices.Clone(sc.Decoys), func(ds DecoySpec) bool { return overlaps(c.plan.fleet, ds.Target, fs.Target) })
		if err := sc.Validate(c.Config.Fleet, c.Config.Duration); err != nil {
			return nil, fmt.Errorf("screen case %d: %w", c.Seed, err)
		}
		c.Config.Scenario = &sc
	}
}

// Simulate runs cfg in memory, its telemetry discarded, and returns the
// ground truth: the truth of a Run of the same cfg into any sink (the
// simulation is deterministic).
func Simulate(ctx context.Context, cfg Config) (*Truth, error) {
	return Run(ctx, cfg, discardSink{})
}

type discardSink struct{}

func (discardSink) Traces(context.Context, ptrace.Traces) error    { return nil }
func (discardSink) Metrics(context.Context, pmetric.Metrics) error { return nil }
