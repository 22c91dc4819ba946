// Package faultlab is the fault lab behind `tailcause sim`: a
// discrete-event simulator of an LLM-serving fleet that emits real-format
// telemetry (vLLM and SGLang request spans, vLLM engine metrics and
// dcgm-exporter GPU metrics, shaped as an OpenTelemetry Collector delivers
// them) for faults whose root cause is known.
//
// What it owns:
//
//   - the fleet model (fleet.go, hardware.go): hosts × GPUs × engines, each
//     engine a pod holding TP GPUs and serving one model;
//   - the engine (engine.go, kvcache.go): vLLM V1-style continuous batching
//     with a token budget per step and chunked prefill, a paged KV cache with
//     a prefix cache keyed by chained block hashes, preemption by recompute,
//     and a roofline step-cost model calibrated to 7–70B models on H100/H200;
//   - the GPU (gpu.go): SM clock under power and thermal governors,
//     temperature, power, DRAM activity, PCIe traffic, XID errors, the
//     clock-event reason bitmask;
//   - the workload (workload.go): replays of the embedded real traces (Azure
//     LLM inference 2023, Mooncake; see workloads/README.md for attribution
//     and licences) or an external trace, with rate scaling, time
//     compression, per-model mixes and optional deployment system prompts.
//     The built-in traces are made stationary at the minute scale (their
//     clock is warped to a uniform rate over 60 s windows, and the Azure
//     length mix is permuted over the hour) so that a fault-free run never
//     breaches a P99 by the drift of the recorded day; bursts shorter than
//     a minute are kept. The router sends session traffic to its session's
//     engine and spreads the rest round-robin, so a slow engine keeps its
//     share of arrivals, as behind a Kubernetes Service;
//   - faults (scenario.go, scenarios/*.json): every cause of the design's
//     taxonomy with onset, duration, magnitude and target, acting through
//     the physics above, plus decoys; the ground truth of a run (truth.go),
//     with each fault's effect on its own engines' P99;
//   - randomized cases (random.go): RandomCase draws, from a seed alone, a
//     fleet (2–8 hosts of 1–8 GPUs of the known kinds, 1–3 models of the
//     known architectures, one-GPU pods and tensor-parallel engines), its
//     load (each model at 30–75% of its engines' capacity, at least 3
//     req/s), scrape intervals (engine 5–15 s, DCGM 10–30 s) and one fault
//     (cause uniform over the taxonomy, target among the kinds the cause
//     accepts, onset 10–60% of the question window, duration, strength
//     from barely visible to strong), sometimes a decoy, or no fault and
//     natural load swings; an optional healthy prefix precedes the window.
//     Screen re-simulates a case in memory and strengthens a fault that
//     does not show in its own entity's P99 (the truth's Effect);
//   - output (emit.go): pdata batches to a Sink in event-time order, bounded
//     in size; the sinks themselves live in package lab/faultlab/sink.
//
// Warm-up: a run simulates Config.Warmup (5 minutes by default) before its
// first instant and emits nothing of it, so that caches, batches and GPU
// temperatures are in their working state when the telemetry starts.
//
// Calibration (calibration_test.go): every fault scenario breaks the P99 of
// its target model's e2e latency (≥ 1.6× over the fault) through its own
// mechanism, and the fault-free ones keep every model's P99 within ±15%.
//
// Determinism: every random draw comes from a math/rand/v2 PCG source
// derived from Config.Seed, one per component; nothing iterates a map into
// the output, and the wall clock is read only for progress reports (and by
// the command for `--start now`). The same Config gives byte-identical
// output.
package faultlab
