package faultlab

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// DefaultStart is the simulated start time when Config.Start is zero: a fixed
// date, so that a seed alone fixes every byte of the output.
func DefaultStart() time.Time { return time.Date(2026, time.January, 5, 14, 0, 0, 0, time.UTC) }

// Config is one simulation run. Zero values mean "default" (see
// DefaultConfig and the field comments); Validate reports what cannot run.
type Config struct {
	// Seed fixes every random choice of the run.
	Seed uint64
	// Start is the simulated time of the first instant (zero: the scenario's
	// start if any, else DefaultStart()).
	Start time.Time
	// Duration of simulated time (zero: the scenario's duration, else 1h).
	Duration time.Duration
	// RateScale multiplies the request rate of every model by thinning or
	// superposing replays of the traces, keeping their burst structure
	// (zero: the scenario's rate scale, else 1).
	RateScale float64
	// TimeCompression, when positive, replays every trace that many times
	// faster than it was recorded and ignores the models' Rate; zero picks
	// the compression that gives each model its Rate.
	TimeCompression float64
	// TraceOverride, when set, names a trace (built-in name or file path)
	// that replaces every workload stream of every model.
	TraceOverride string

	// Fleet is the fleet to simulate (a scenario may replace it).
	Fleet FleetSpec

	// StepSpanShare is the share of engines (0-1) that export SGLang-style
	// spans with one decode_loop span per generated token; the rest export
	// vLLM llm_request spans only. It bounds the number of step spans.
	StepSpanShare float64

	// VLLMScrapeInterval and DCGMScrapeInterval are the Prometheus scrape
	// intervals of the engine and GPU exporters.
	VLLMScrapeInterval time.Duration
	DCGMScrapeInterval time.Duration
	// DCGMDefaultFields: the dcgm-exporter runs with its default field set,
	// which leaves DCGM_FI_DEV_CLOCKS_EVENT_REASONS off, so a throttle shows
	// only as the SM clock below its norm with the temperature or the power
	// at its limit (the enricher derives the reasons then).
	DCGMDefaultFields bool
	// Router is how each model's router spreads the requests that carry no
	// session prefix over its engines (zero: RouteRoundRobin). Requests of
	// a session go to the engine their session hashes to, whatever it is,
	// unless that engine is much busier than the least loaded one.
	Router RouterPolicy
	// PhysicsTick is the step of the GPU thermal/power model.
	PhysicsTick time.Duration
	// Warmup is simulated before the first instant and emits nothing: the
	// fleet starts the run warm (prefix caches filled, batches running,
	// GPUs at their working temperature), as a monitored fleet is. Zero:
	// DefaultWarmup; negative: none (a cold start at the first instant).
	Warmup time.Duration
	// FlushInterval bounds how long (simulated) a span or metric waits in a
	// batch; MaxBatchSpans bounds the size of a trace batch.
	FlushInterval time.Duration
	MaxBatchSpans int

	// Scenario supplies the faults (nil: no faults, "baseline").
	Scenario *Scenario
}

// FleetSpec is the simulated fleet: hosts with GPUs, and model deployments
// whose engines (one vLLM server per pod) are placed on those GPUs.
type FleetSpec struct {
	Namespace string      `json:"namespace,omitempty"`
	Hosts     []HostSpec  `json:"hosts"`
	Models    []ModelSpec `json:"models"`
}

// HostSpec is one machine.
type HostSpec struct {
	Name string `json:"name"`
	GPU  string `json:"gpu"`  // a GPUKind name
	GPUs int    `json:"gpus"` // number of GPUs
}

// ModelSpec is one model deployment.
type ModelSpec struct {
	Name    string   `json:"name"`            // a ModelArch name
	Hosts   []string `json:"hosts,omitempty"` // hosts to place engines on, in order (empty: any)
	Engines int      `json:"engines"`         // engine replicas (pods)
	TP      int      `json:"tp"`              // tensor parallel degree: GPUs per engine
	// Rate is the request rate of the model, requests/s, at RateScale 1.
	Rate float64 `json:"rate"`
	// MaxBatchedTokens is the per-step token budget (vLLM
	// max_num_batched_tokens, chunked prefill); zero: 2048.
	MaxBatchedTokens int `json:"max_batched_tokens,omitempty"`
	// MaxNumSeqs bounds the running batch; zero: 256.
	MaxNumSeqs int `json:"max_num_seqs,omitempty"`
	// MaxModelLen is the deployment's context limit (vLLM --max-model-len);
	// zero: the architecture's. A request whose prompt does not fit is
	// rejected by the API server (HTTP 400) and never reaches the engine.
	MaxModelLen int `json:"max_model_len,omitempty"`
	// Workload mixes traces; shares are normalised.
	Workload []StreamSpec `json:"workload"`
}

// StreamSpec is one trace replayed into a model.
type StreamSpec struct {
	Trace string  `json:"trace"` // built-in trace name (see TraceNames) or a file path
	Share float64 `json:"share"` // share of the model's rate
	// SystemPromptTokens, when set, puts a system prompt of that many
	// tokens (one of four, the first the most used) in front of every
	// prompt of the stream, as an agent platform prepends its instructions
	// and tool definitions: the prefix cache holds it, and losing the
	// cache multiplies the prefill work. Trace lengths are the user part.
	SystemPromptTokens int `json:"system_prompt_tokens,omitempty"`
}

// DefaultFleet is 16 GPUs on four hosts: eight llama-3.1-8b engines on two
// H100 hosts, two qwen2.5-32b TP2 engines and one llama-3.1-70b TP4 engine
// on two H200 hosts. Every model serves the Azure chat and code traces, at
// rates that keep each model's P99 estimate stable over a few minutes (a
// single engine needs a few requests per second for that); the 70b serves
// an agent platform whose 2k-token system prompt the prefix cache holds.
// The Mooncake traces (long multi-turn contexts, session affinity) stay
// available to custom fleets and --trace: their P99 is dominated by a few
// very long requests and moves by ±40% from one 8-minute window to the
// next with no fault at all.
func DefaultFleet() FleetSpec {
	return FleetSpec{
		Namespace: "llm-serving",
		Hosts: []HostSpec{
			{Name: "node-1", GPU: "H100", GPUs: 4},
			{Name: "node-2", GPU: "H100", GPUs: 4},
			{Name: "node-3", GPU: "H200", GPUs: 4},
			{Name: "node-4", GPU: "H200", GPUs: 4},
		},
		Models: []ModelSpec{
			{
				Name: "llama-3.1-8b", Hosts: []string{"node-1", "node-2"}, Engines: 8, TP: 1,
				Rate: 36, MaxBatchedTokens: 2048,
				Workload: []StreamSpec{{Trace: "azure-conv", Share: 0.7}, {Trace: "azure-code", Share: 0.3}},
			},
			{
				Name: "qwen2.5-32b", Hosts: []string{"node-3"}, Engines: 2, TP: 2,
				Rate: 2.4, MaxBatchedTokens: 2048,
				Workload: []StreamSpec{{Trace: "azure-conv", Share: 0.8}, {Trace: "azure-code", Share: 0.2}},
			},
			{
				Name: "llama-3.1-70b", Hosts: []string{"node-4"}, Engines: 1, TP: 4,
				Rate: 2, MaxBatchedTokens: 2048,
				Workload: []StreamSpec{{Trace: "azure-conv", Share: 1, SystemPromptTokens: 2048}},
			},
		},
	}
}

// DefaultWarmup is the warm-up simulated before the run when
// Config.Warmup is zero.
const DefaultWarmup = 5 * time.Minute

// DefaultConfig is the default fleet for one simulated hour, seed 1.
func DefaultConfig() Config {
	return Config{
		Seed:               1,
		Fleet:              DefaultFleet(),
		StepSpanShare:      0.1,
		VLLMScrapeInterval: 10 * time.Second,
		DCGMScrapeInterval: 30 * time.Second,
		PhysicsTick:        time.Second,
		FlushInterval:      2 * time.Second,
		MaxBatchSpans:      4096,
	}
}

// resolved fills the zero values from the scenario and the defaults.
func (c Config) resolved() Config {
	d := DefaultConfig()
	sc := c.Scenario
	if c.Start.IsZero() {
		c.Start = DefaultStart()
	}
	if c.Duration == 0 {
		c.Duration = time.Hour
		if sc != nil && sc.duration > 0 {
			c.Duration = sc.duration
		}
	}
	if c.RateScale == 0 {
		c.RateScale = 1
		if sc != nil && sc.RateScale > 0 {
			c.RateScale = sc.RateScale
		}
	}
	if sc != nil && sc.Fleet != nil {
		c.Fleet = *sc.Fleet
	}
	if len(c.Fleet.Hosts) == 0 && len(c.Fleet.Models) == 0 {
		c.Fleet = d.Fleet
	}
	if c.Fleet.Namespace == "" {
		c.Fleet.Namespace = "llm-serving"
	}
	if c.VLLMScrapeInterval == 0 {
		c.VLLMScrapeInterval = d.VLLMScrapeInterval
	}
	if c.DCGMScrapeInterval == 0 {
		c.DCGMScrapeInterval = d.DCGMScrapeInterval
	}
	if c.PhysicsTick == 0 {
		c.PhysicsTick = d.PhysicsTick
	}
	if c.Router == "" {
		c.Router = RouteRoundRobin
	}
	if c.Warmup == 0 {
		c.Warmup = DefaultWarmup
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.MaxBatchSpans == 0 {
		c.MaxBatchSpans = d.MaxBatchSpans
	}
	return c
}

// RouterPolicy is a model router's policy for requests without a session.
type RouterPolicy string

// The router policies.
const (
	// RouteRoundRobin cycles over the engines that are up: the vLLM
	// production-stack router's default. A slow engine keeps its share of
	// arrivals, builds a bigger batch and a queue.
	RouteRoundRobin RouterPolicy = "round-robin"
	// RouteRandom picks an engine that is up at random: a Kubernetes
	// Service through kube-proxy, one connection per request.
	RouteRandom RouterPolicy = "random"
	// RouteLeastLoaded picks the engine with the fewest requests running
	// and waiting (ties at random): an inference gateway's endpoint
	// picker. It steers around a slow engine, which hides part of it.
	RouteLeastLoaded RouterPolicy = "least-loaded"
)

// RouterPolicies lists the policies, the default first.
func RouterPolicies() []RouterPolicy {
	return []RouterPolicy{RouteRoundRobin, RouteRandom, RouteLeastLoaded}
}

// Validate reports every reason the configuration cannot run.
func (c Config) Validate() error {
	c = c.resolved()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Duration < 0 {
		bad("duration: negative (%v)", c.Duration)
	}
	if c.Duration > 0 && c.Duration < time.Second {
		bad("duration: %v is under one second", c.Duration)
	}
	if !(c.RateScale > 0) || math.IsInf(c.RateScale, 0) || c.RateScale > 1000 {
		bad("rate scale: %v not in (0, 1000]", c.RateScale)
	}
	if c.TimeCompression < 0 || math.IsNaN(c.TimeCompression) || math.IsInf(c.TimeCompression, 0) {
		bad("time compression: %v is negative or not finite", c.TimeCompression)
	}
	if !(c.StepSpanShare >= 0 && c.StepSpanShare <= 1) {
		bad("step span share: %v not in [0, 1]", c.StepSpanShare)
	}
	for _, iv := range []struct {
		name string
		d    time.Duration
	}{
		{"vllm scrape interval", c.VLLMScrapeInterval},
		{"dcgm scrape interval", c.DCGMScrapeInterval},
		{"physics tick", c.PhysicsTick},
		{"flush interval", c.FlushInterval},
	} {
		if iv.d < 10*time.Millisecond {
			bad("%s: %v is under 10ms", iv.name, iv.d)
		}
	}
	if !slices.Contains(RouterPolicies(), c.Router) {
		bad("router: %q is none of %v", c.Router, RouterPolicies())
	}
	if c.Warmup > 24*time.Hour {
		bad("warmup: %v is over a day", c.Warmup)
	}
	if c.MaxBatchSpans < 1 {
		bad("max batch spans: %d is not positive", c.MaxBatchSpans)
	}
	if _, err := buildFleet(c.Fleet, c.StepSpanShare); err != nil {
		errs = append(errs, fmt.Errorf("fleet: %w", err))
	}
	return errors.Join(errs...)
}
