package faultlab

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tailcause/tailcause/schemas"
)

//go:embed scenarios/*.json
var scenarioFS embed.FS

// Scenario is one scenario file (lab/faultlab/scenarios/*.json): the
// faults to inject, with onset, duration, magnitude and target, plus decoys
// (harmless metric movements) and optional run settings.
type Scenario struct {
	Name        string      `json:"name"`
	Description string      `json:"description"`
	Duration    string      `json:"duration,omitempty"`   // default run length, e.g. "1h"
	RateScale   float64     `json:"rate_scale,omitempty"` // default rate scale
	Fleet       *FleetSpec  `json:"fleet,omitempty"`      // replaces the default fleet
	Faults      []FaultSpec `json:"faults"`
	Decoys      []DecoySpec `json:"decoys,omitempty"`

	file     string
	duration time.Duration
}

// FaultSpec is one injected fault. Onset and Duration are Go durations from
// the run start ("20m") or percentages of the run length ("40%").
// Magnitude's meaning depends on the cause (see Causes).
type FaultSpec struct {
	Cause     string  `json:"cause"`
	Target    Target  `json:"target"`
	Onset     string  `json:"onset"`
	Duration  string  `json:"duration"`
	Magnitude float64 `json:"magnitude"`
	XID       int     `json:"xid,omitempty"`   // gpu.xid_error only: the XID code (default 13)
	Brake     bool    `json:"brake,omitempty"` // gpu.power_cap only: also assert the hardware power brake
	Note      string  `json:"note,omitempty"`
}

// DecoySpec is a harmless movement of a metric: it must not be blamed.
type DecoySpec struct {
	Kind      string  `json:"kind"`
	Target    Target  `json:"target"`
	Onset     string  `json:"onset"`
	Duration  string  `json:"duration"`
	Magnitude float64 `json:"magnitude"`
	Note      string  `json:"note,omitempty"`
}

// Target names exactly one entity: a host, a GPU ("host/index" or its
// UUID), an engine (its pod name; "engine" and "pod" are synonyms since each
// pod runs one engine) or a model.
type Target struct {
	Host   string `json:"host,omitempty"`
	GPU    string `json:"gpu,omitempty"`
	Pod    string `json:"pod,omitempty"`
	Engine string `json:"engine,omitempty"`
	Model  string `json:"model,omitempty"`
}

// Cause describes one cause of the taxonomy as the simulator injects it.
type Cause struct {
	ID        string
	Targets   []string // target kinds accepted: model, host, gpu, engine
	MagMin    float64  // exclusive
	MagMax    float64  // inclusive
	Magnitude string   // what the magnitude means
	Mechanism string
}

// injections says how the simulator injects each cause of the taxonomy
// (schemas.Causes); TestCausesMatchTaxonomy checks that it covers the
// taxonomy and nothing else.
var injections = map[schemas.Cause]Cause{
	schemas.CauseKVPreemption: {
		Targets: []string{"engine", "model"}, MagMin: 0, MagMax: 0.99,
		Magnitude: "fraction of the engine's KV-cache blocks lost",
		Mechanism: "KV capacity shrinks; the scheduler preempts (recompute) when blocks run out"},
	schemas.CauseQueueSaturation: {
		Targets: []string{"model", "engine"}, MagMin: 0, MagMax: 20,
		Magnitude: "model: extra arrivals per arrival (rate × (1+m)); engine: share of the model's traffic forced onto the engine",
		Mechanism: "arrivals above capacity; requests wait in the engine queue"},
	schemas.CauseLongPrompts: {
		Targets: []string{"model"}, MagMin: 0, MagMax: 20,
		Magnitude: "prompt lengths × (1+m)",
		Mechanism: "the prompt-length mix shifts; prefill and KV use grow"},
	schemas.CauseLongOutputs: {
		Targets: []string{"model"}, MagMin: 0, MagMax: 20,
		Magnitude: "output lengths × (1+m)",
		Mechanism: "the output-length mix shifts; decode time and KV occupancy grow"},
	schemas.CausePrefixMiss: {
		Targets: []string{"engine", "model"}, MagMin: 0, MagMax: 1,
		Magnitude: "probability that a prefix-cache lookup misses (1: caching disabled); the cache is flushed at onset",
		Mechanism: "prefix hit ratio collapses; prefill grows"},
	schemas.CausePrefillInterference: {
		Targets: []string{"engine", "model"}, MagMin: 0, MagMax: 64,
		Magnitude: "per-step token budget × (1+m) (chunked prefill effectively off); the model's long prompts (≥ 4608 tokens besides any system prompt: a long-context tenant) are pinned to the engine",
		Mechanism: "large prefills share steps with decodes; the engine's prompt throughput rises and token streams stall"},
	schemas.CauseThermalThrottle: {
		Targets: []string{"gpu", "host"}, MagMin: 0, MagMax: 3,
		Magnitude: "cooling loss: thermal resistance × (1+4m)",
		Mechanism: "temperature rises; the thermal governor lowers the SM clock (0x20/0x40)"},
	schemas.CausePowerCap: {
		Targets: []string{"gpu", "host"}, MagMin: 0, MagMax: 0.95,
		Magnitude: "power limit = idle + (TDP − idle)·(1−m)",
		Mechanism: "the power governor lowers the SM clock (0x4; 0x80 with brake)"},
	schemas.CauseXIDError: {
		Targets: []string{"gpu", "host"}, MagMin: 0, MagMax: 6,
		Magnitude: "XID events per minute (the first at onset); each hangs the engine 30 s (until its liveness probe fails), fails its requests and restarts it (60 s)",
		Mechanism: "XID errors; requests error and the engine restarts"},
	schemas.CausePCIeContention: {
		Targets: []string{"gpu", "host"}, MagMin: 0, MagMax: 0.97,
		Magnitude: "share of the PCIe link taken by a neighbour",
		Mechanism: "host↔device transfers queue behind the neighbour; every step slows"},
	schemas.CauseMemoryBandwidth: {
		Targets: []string{"gpu", "host"}, MagMin: 0, MagMax: 0.95,
		Magnitude: "share of DRAM bandwidth taken by co-located work",
		Mechanism: "DRAM active near saturation; memory-bound decode slows"},
	schemas.CauseEntityDegraded: {
		Targets: []string{"engine", "gpu", "host"}, MagMin: 0, MagMax: 10,
		Magnitude: "step time × (1+m), with no telemetry explaining it",
		Mechanism: "one entity is slow and no measured mechanism explains it"},
}

// causes is the taxonomy, in its order, as the simulator injects it.
var causes = injectable()

func injectable() []Cause {
	var out []Cause
	for _, id := range schemas.Causes() {
		if c, ok := injections[id]; ok {
			c.ID = string(id)
			out = append(out, c)
		}
	}
	return out
}

var decoyKinds = []Cause{
	{"gpu.temperature", []string{"gpu", "host"}, 0, 25,
		"inlet temperature + m °C (stays below the slowdown threshold when small)",
		"temperature moves, clocks do not"},
	{"gpu.pcie_traffic", []string{"gpu", "host"}, 0, 0.5,
		"share of the PCIe link used by a harmless neighbour",
		"PCIe bytes move, latency barely"},
	{"workload.rate_swing", []string{"model"}, 0, 1,
		"extra arrivals per arrival (rate × (1+m)), drawn from the model's own traces; a scenario keeps it within capacity",
		"traffic rises and falls as it does over a day; queues and KV use move a little, the tail barely"},
}

// Causes lists the taxonomy causes the simulator injects, in the taxonomy's
// order (schemas.Causes).
func Causes() []Cause { return slices.Clone(causes) }

// DecoyKinds lists the decoy kinds.
func DecoyKinds() []Cause { return slices.Clone(decoyKinds) }

func lookupCause(list []Cause, id string) (Cause, bool) {
	for _, c := range list {
		if c.ID == id {
			return c, true
		}
	}
	return Cause{}, false
}

// taxonomyIDs lists the taxonomy's cause ids (schemas.Causes).
func taxonomyIDs() string {
	var ids []string
	for _, c := range schemas.Causes() {
		ids = append(ids, string(c))
	}
	return strings.Join(ids, ", ")
}

func causeIDs(list []Cause) string {
	ids := make([]string, len(list))
	for i, c := range list {
		ids[i] = c.ID
	}
	return strings.Join(ids, ", ")
}

// ScenarioInfo is one line of `tailcause sim --list`.
type ScenarioInfo struct {
	Name        string
	Description string
	Causes      []string
}

// ListScenarios returns the built-in scenarios, sorted by name.
func ListScenarios() ([]ScenarioInfo, error) {
	ents, err := fs.ReadDir(scenarioFS, "scenarios")
	if err != nil {
		return nil, err
	}
	var out []ScenarioInfo
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		sc, err := LoadScenario(strings.TrimSuffix(e.Name(), ".json"))
		if err != nil {
			return nil, err
		}
		info := ScenarioInfo{Name: sc.Name, Description: sc.Description}
		for _, f := range sc.Faults {
			info.Causes = append(info.Causes, f.Cause)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// LoadScenario loads a built-in scenario by name, or a scenario file by path.
func LoadScenario(nameOrPath string) (*Scenario, error) {
	if !strings.ContainsAny(nameOrPath, "/\\") && !strings.HasSuffix(nameOrPath, ".json") {
		data, err := scenarioFS.ReadFile("scenarios/" + nameOrPath + ".json")
		if err != nil {
			names := []string{}
			if ents, err := fs.ReadDir(scenarioFS, "scenarios"); err == nil {
				for _, e := range ents {
					names = append(names, strings.TrimSuffix(e.Name(), ".json"))
				}
			}
			return nil, fmt.Errorf("unknown scenario %q (built-in: %s; or give a .json path)", nameOrPath, strings.Join(names, ", "))
		}
		return ParseScenario("scenarios/"+nameOrPath+".json", data)
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	return ParseScenario(nameOrPath, data)
}

// ParseScenario decodes and validates a scenario file strictly: unknown
// fields, wrong types, unknown causes, targets that do not exist in the
// fleet (the scenario's own, else DefaultFleet), and bad times or
// magnitudes are errors that name the file and the field.
func ParseScenario(file string, data []byte) (*Scenario, error) {
	wrap := func(err error) error { return fmt.Errorf("scenario %s: %w", file, err) }
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, wrap(fmt.Errorf("invalid JSON: %w", err))
	}
	if dec.More() {
		return nil, wrap(errors.New("trailing data after the scenario object"))
	}
	if err := checkShape(raw, reflect.TypeFor[Scenario](), ""); err != nil {
		return nil, wrap(err)
	}
	var sc Scenario
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return nil, wrap(err)
	}
	sc.file = file
	fl := DefaultFleet()
	if sc.Fleet != nil {
		fl = *sc.Fleet
	}
	if err := sc.validate(fl, 0); err != nil {
		return nil, wrap(err)
	}
	return &sc, nil
}

// File is the path the scenario was read from.
func (s *Scenario) File() string { return s.file }

// Validate checks the scenario against a fleet and a run length (zero: the
// scenario's own, else 1h).
func (s *Scenario) Validate(fl FleetSpec, runLength time.Duration) error {
	if err := s.validate(fl, runLength); err != nil {
		return fmt.Errorf("scenario %s: %w", s.file, err)
	}
	return nil
}

func (s *Scenario) validate(fl FleetSpec, runLength time.Duration) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if s.Name == "" {
		bad("name: empty")
	} else if strings.Trim(s.Name, "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
		bad("name: %q may hold only a-z, 0-9, _ and -", s.Name)
	}
	if s.Duration != "" {
		d, err := time.ParseDuration(s.Duration)
		switch {
		case err != nil:
			bad("duration: %v", err)
		case d < time.Second:
			bad("duration: %q is under one second", s.Duration)
		default:
			s.duration = d
		}
	}
	if s.RateScale < 0 || s.RateScale > 1000 || math.IsNaN(s.RateScale) {
		bad("rate_scale: %v not in (0, 1000]", s.RateScale)
	}
	if runLength == 0 {
		runLength = s.duration
	}
	if runLength == 0 {
		runLength = time.Hour
	}
	f, err := buildFleet(fl, 0)
	if err != nil {
		bad("fleet: %v", err)
		return errors.Join(errs...)
	}
	for i, fs := range s.Faults {
		p := fmt.Sprintf("faults[%d]", i)
		c, ok := lookupCause(causes, fs.Cause)
		if !ok {
			bad("%s.cause: unknown cause %q (known: %s)", p, fs.Cause, taxonomyIDs())
			continue
		}
		if _, err := resolveTarget(f, fs.Target, c.Targets); err != nil {
			bad("%s.target: %v", p, err)
		}
		checkWindow(p, fs.Onset, fs.Duration, runLength, bad)
		if !(fs.Magnitude > c.MagMin && fs.Magnitude <= c.MagMax) {
			bad("%s.magnitude: %v not in (%v, %v] for %s (%s)", p, fs.Magnitude, c.MagMin, c.MagMax, c.ID, c.Magnitude)
		}
		if fs.Cause == "queue.saturation" && fs.Target.Model == "" && fs.Magnitude > 1 {
			bad("%s.magnitude: %v: at an engine it is a share of traffic, at most 1", p, fs.Magnitude)
		}
		if fs.XID != 0 && fs.Cause != "gpu.xid_error" {
			bad("%s.xid: only for gpu.xid_error", p)
		}
		if fs.XID < 0 || fs.XID > 1000 {
			bad("%s.xid: %d not in [1, 1000]", p, fs.XID)
		}
		if fs.Brake && fs.Cause != "gpu.power_cap" {
			bad("%s.brake: only for gpu.power_cap", p)
		}
	}
	for i, ds := range s.Decoys {
		p := fmt.Sprintf("decoys[%d]", i)
		c, ok := lookupCause(decoyKinds, ds.Kind)
		if !ok {
			bad("%s.kind: unknown decoy kind %q (known: %s)", p, ds.Kind, causeIDs(decoyKinds))
			continue
		}
		if _, err := resolveTarget(f, ds.Target, c.Targets); err != nil {
			bad("%s.target: %v", p, err)
		}
		checkWindow(p, ds.Onset, ds.Duration, runLength, bad)
		if !(ds.Magnitude > c.MagMin && ds.Magnitude <= c.MagMax) {
			bad("%s.magnitude: %v not in (%v, %v] for %s (%s)", p, ds.Magnitude, c.MagMin, c.MagMax, c.ID, c.Magnitude)
		}
	}
	return errors.Join(errs...)
}

func checkWindow(p, onset, dur string, runLength time.Duration, bad func(string, ...any)) {
	on, err := parseOffset(onset, runLength)
	if err != nil {
		bad("%s.onset: %v", p, err)
		return
	}
	d, err := parseOffset(dur, runLength)
	if err != nil {
		bad("%s.duration: %v", p, err)
		return
	}
	if d == 0 {
		bad("%s.duration: zero", p)
	}
	if on >= runLength {
		bad("%s.onset: %q is at or past the end of the run (%v)", p, onset, runLength)
	}
}

// parseOffset reads "20m" or "40%" (of total).
func parseOffset(s string, total time.Duration) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("missing (want a duration such as \"20m\" or a share of the run such as \"40%\")")
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("%q is not a percentage", s)
		}
		if v < 0 {
			return 0, fmt.Errorf("negative duration %q", s)
		}
		if v > 100 {
			return 0, fmt.Errorf("%q is more than the whole run", s)
		}
		return time.Duration(v / 100 * float64(total)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %v", s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

// resolved target: what a fault acts on.
type resolvedTarget struct {
	kind    string // model, host, gpu, engine
	model   *model
	host    *host
	gpus    []*gpu
	engines []*engine
}

func resolveTarget(f *fleet, t Target, allowed []string) (resolvedTarget, error) {
	var set []string
	if t.Host != "" {
		set = append(set, "host")
	}
	if t.GPU != "" {
		set = append(set, "gpu")
	}
	if t.Pod != "" {
		set = append(set, "pod")
	}
	if t.Engine != "" {
		set = append(set, "engine")
	}
	if t.Model != "" {
		set = append(set, "model")
	}
	if len(set) != 1 {
		return resolvedTarget{}, fmt.Errorf("name exactly one of host, gpu, pod/engine, model (got %d: %v)", len(set), set)
	}
	kind := set[0]
	if kind == "pod" {
		kind = "engine"
	}
	if !slices.Contains(allowed, kind) {
		return resolvedTarget{}, fmt.Errorf("%s target not allowed here (allowed: %s)", kind, strings.Join(allowed, ", "))
	}
	rt := resolvedTarget{kind: kind}
	switch kind {
	case "host":
		h := f.host(t.Host)
		if h == nil {
			return rt, fmt.Errorf("host: no host %q in the fleet (hosts: %s)", t.Host, strings.Join(hostNames(f.hosts), ", "))
		}
		rt.host = h
		rt.gpus = h.gpus
		rt.engines = h.engines
	case "gpu":
		g := f.gpuByRef(t.GPU)
		if g == nil {
			return rt, fmt.Errorf("gpu: no GPU %q in the fleet (give host/index such as %q, or a UUID)", t.GPU, f.gpus[0].host.name+"/0")
		}
		if g.engine == nil {
			return rt, fmt.Errorf("gpu: GPU %q holds no engine", t.GPU)
		}
		rt.host, rt.gpus, rt.engines, rt.model = g.host, []*gpu{g}, []*engine{g.engine}, g.engine.m
	case "engine":
		name := t.Pod + t.Engine
		e := f.engineByPod(name)
		if e == nil {
			var pods []string
			for _, e := range f.engines {
				pods = append(pods, e.pod)
			}
			return rt, fmt.Errorf("engine: no engine pod %q in the fleet (pods: %s)", name, strings.Join(pods, ", "))
		}
		rt.host, rt.gpus, rt.engines, rt.model = e.host, e.gpus, []*engine{e}, e.m
	case "model":
		m := f.model(t.Model)
		if m == nil {
			var names []string
			for _, m := range f.models {
				names = append(names, m.spec.Name)
			}
			return rt, fmt.Errorf("model: no model %q in the fleet (models: %s)", t.Model, strings.Join(names, ", "))
		}
		rt.model = m
		rt.engines = m.engines
		for _, e := range m.engines {
			rt.gpus = append(rt.gpus, e.gpus...)
		}
	}
	return rt, nil
}

// checkShape walks decoded JSON against the Go type, so that unknown fields
// and wrong types are reported with their full path ("faults[2].onset").
func checkShape(v any, t reflect.Type, p string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := p
	if name == "" {
		name = "top level"
	}
	want := func(what string) error { return fmt.Errorf("%s: want %s, got %s", name, what, jsonKind(v)) }
	if v == nil {
		return nil // null: zero value
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return want("an object")
		}
		fields := map[string]reflect.StructField{}
		var known []string
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			tag, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			fields[tag] = sf
			known = append(known, tag)
		}
		for _, k := range sortedKeys(obj) {
			sf, ok := fields[k]
			if !ok {
				return fmt.Errorf("%s: unknown field %q (known: %s)", name, k, strings.Join(known, ", "))
			}
			if err := checkShape(obj[k], sf.Type, joinPath(p, k)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return want("an array")
		}
		for i, x := range arr {
			if err := checkShape(x, t.Elem(), fmt.Sprintf("%s[%d]", p, i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.String:
		if _, ok := v.(string); !ok {
			return want("a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return want("true or false")
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, ok := v.(json.Number)
		if !ok {
			return want("an integer")
		}
		if _, err := n.Int64(); err != nil {
			return fmt.Errorf("%s: %s is not an integer", name, n)
		}
	case reflect.Float64, reflect.Float32:
		n, ok := v.(json.Number)
		if !ok {
			return want("a number")
		}
		if _, err := n.Float64(); err != nil {
			return fmt.Errorf("%s: %s is not a number", name, n)
		}
	}
	return nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return "null"
}

func joinPath(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

// sortedKeys returns the keys of m in order, for deterministic iteration.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
