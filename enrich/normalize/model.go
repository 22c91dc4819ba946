package normalize

// The normalized model: what every per-source adapter produces and what the
// join stage consumes. Units are fixed here, once: times are Unix nanoseconds
// (uint64), durations are milliseconds (float64, NaN when the source did not
// say), token counts are int64 (-1 when the source did not say).

// Source names the system that emitted a request span.
type Source string

// Sources the adapters recognise.
const (
	SourceVLLM   Source = "vllm"
	SourceSGLang Source = "sglang"
	SourceTGI    Source = "tgi"
	SourceTriton Source = "triton"
	SourceTRTLLM Source = "trtllm"
	SourceGenAI  Source = "genai" // OpenTelemetry GenAI client/gateway spans
)

// TimelineSource says where a request's token timeline came from.
type TimelineSource string

const (
	// TimelineSteps: per-step spans (SGLang decode_loop, TGI send_generation).
	TimelineSteps TimelineSource = "steps"
	// TimelineEvents: span events carrying the timeline (Triton, TRT-LLM).
	TimelineEvents TimelineSource = "events"
	// TimelineAggregate: only aggregate latencies (vLLM); TPOT is a mean.
	TimelineAggregate TimelineSource = "aggregate"
)

// Placement is where something ran, as far as the telemetry says. Empty
// fields are unknown. Host is the partition/join key of the enricher.
type Placement struct {
	Host            string // host.name | k8s.node.name | DCGM Hostname/hostname
	Pod             string // k8s.pod.name | DCGM pod label (the GPU's workload)
	Namespace       string // k8s.namespace.name | DCGM namespace label
	ServiceInstance string // service.instance.id
	Engine          string // vLLM "engine" label (engine index as a string)
	GPU             string // GPU UUID (DCGM UUID/uuid label)
	GPUIndex        string // DCGM gpu label
}

// Request is one LLM request, from its root span.
type Request struct {
	UID          string // hex trace id + "-" + hex span id of the root span
	TraceID      string // hex
	SpanID       string // hex
	ParentSpanID string // hex, empty for a root
	RequestID    string // gen_ai.request.id | rid | triton.request_id
	Source       Source
	SpanName     string
	Service      string // service.name
	Model        string // gen_ai.request.model | gen_ai.response.model | triton.model_name | model resource attr
	Placement    Placement

	StartNs uint64
	EndNs   uint64

	Error        bool
	FinishReason string // first finish reason ("stop", "length", "abort", "error", ...)

	// Latencies in milliseconds, NaN when the source did not report them.
	E2EMs        float64
	TTFTMs       float64
	QueueMs      float64
	PrefillMs    float64
	DecodeMs     float64
	InferenceMs  float64
	KVTransferMs float64

	PromptTokens     int64 // -1 when unknown
	CompletionTokens int64 // -1 when unknown
	CachedTokens     int64 // -1 when unknown
	MaxTokens        int64 // -1 when unknown

	// TokenTimesNs are token emission times when the span itself carries a
	// per-token timeline (span events); step spans arrive as Steps instead.
	TokenTimesNs   []uint64
	TimelineSource TimelineSource
	Retracts       int // preemptions seen on the request itself (SGLang "retract" events)

	// Extra attributes, as parallel arrays (sorted by key).
	AttrKeys   []string
	AttrValues []string
}

// StepKind is the kind of a per-step span.
type StepKind string

const (
	StepDecode  StepKind = "decode"  // one decode iteration / one generated token
	StepPrefill StepKind = "prefill" // a prefill forward or chunk
	StepRetract StepKind = "retract" // a preemption of the request
)

// Step is one per-step span or event that belongs to a request in the same
// trace: SGLang decode_loop / prefill_forward / retract, TGI send_generation.
type Step struct {
	TraceID       string // hex
	SpanID        string // hex of the step span itself
	RequestSpanID string // hex of the request's root span when resolvable, else ""
	Source        Source
	Kind          StepKind
	StartNs       uint64
	EndNs         uint64 // the token is emitted at EndNs
	Tokens        int    // tokens emitted by this step (1 unless the span says otherwise)
}

// Family groups metric samples by what they describe.
type Family string

const (
	FamilyEngine Family = "engine" // vLLM / SGLang / TGI engine metrics
	FamilyGPU    Family = "gpu"    // dcgm-exporter
)

// Metric is a canonical metric name, independent of the emitting system.
type Metric string

// Canonical metrics. Engine: one series per (host, model, engine). GPU: one
// series per (host, GPU UUID).
const (
	MetricRunning          Metric = "num_running"       // gauge, requests
	MetricWaiting          Metric = "num_waiting"       // gauge, requests
	MetricKVUsage          Metric = "kv_usage"          // gauge, 0-1
	MetricPreemptions      Metric = "preemptions"       // counter, preemptions
	MetricPrefixQueries    Metric = "prefix_queries"    // counter, tokens
	MetricPrefixHits       Metric = "prefix_hits"       // counter, tokens
	MetricPrefixHitRate    Metric = "prefix_hit_rate"   // gauge, 0-1 (SGLang cache_hit_rate)
	MetricPromptTokens     Metric = "prompt_tokens"     // counter, tokens
	MetricGenerationTokens Metric = "generation_tokens" // counter, tokens
	MetricRecomputedTokens Metric = "recomputed_tokens" // counter, tokens
	MetricRequestSuccess   Metric = "request_success"   // counter, finished requests (all finish reasons)
	MetricBatchSize        Metric = "batch_size"        // gauge (TGI)
	// From the histogram of tokens per engine step (vllm:iteration_tokens_total),
	// each bucket's count times its upper bound (the +Inf bucket's: twice the
	// last bound), and times its square. Their deltas' ratio is the
	// token-weighted mean step size: how large the step is that the average
	// token is computed in (large prefills batched with decodes).
	MetricStepTokens   Metric = "step_tokens"    // counter, Σ count·bound
	MetricStepTokensSq Metric = "step_tokens_sq" // counter, Σ count·bound²

	MetricSMClock          Metric = "sm_clock_mhz"         // gauge
	MetricMemClock         Metric = "mem_clock_mhz"        // gauge
	MetricGPUTemp          Metric = "gpu_temp_c"           // gauge
	MetricMemTemp          Metric = "mem_temp_c"           // gauge
	MetricPower            Metric = "power_w"              // gauge
	MetricGPUUtil          Metric = "gpu_util"             // gauge, 0-1 (DCGM % / 100)
	MetricMemCopyUtil      Metric = "mem_copy_util"        // gauge, 0-1 (DCGM % / 100)
	MetricFBUsed           Metric = "fb_used_mib"          // gauge
	MetricFBFree           Metric = "fb_free_mib"          // gauge
	MetricXID              Metric = "xid_last"             // gauge: last XID code, not a count
	MetricXIDCount         Metric = "xid_count"            // gauge: XID errors in dcgm-exporter's window (DCGM_EXP_XID_ERRORS_COUNT, summed over xid)
	MetricXIDTotal         Metric = "xid_total"            // counter: XID errors since exporter start (DCGM_EXP_XID_ERRORS_TOTAL, summed over xid)
	MetricPCIeReplay       Metric = "pcie_replays"         // counter
	MetricNVLinkBytes      Metric = "nvlink_bytes"         // counter
	MetricGREngineActive   Metric = "gr_engine_active"     // gauge, 0-1
	MetricTensorActive     Metric = "tensor_active"        // gauge, 0-1
	MetricDRAMActive       Metric = "dram_active"          // gauge, 0-1
	MetricSMActive         Metric = "sm_active"            // gauge, 0-1
	MetricSMOccupancy      Metric = "sm_occupancy"         // gauge, 0-1
	MetricPCIeTx           Metric = "pcie_tx_bytes_per_s"  // gauge
	MetricPCIeRx           Metric = "pcie_rx_bytes_per_s"  // gauge
	MetricPowerViolation   Metric = "power_violation_ns"   // counter
	MetricThermalViolation Metric = "thermal_violation_ns" // counter
	MetricClockReasons     Metric = "clock_event_reasons"  // gauge, bitmask (see Throttle*)
)

// Clock-event (throttle) reason bits of DCGM_FI_DEV_CLOCKS_EVENT_REASONS.
const (
	ThrottleGPUIdle       uint32 = 0x1
	ThrottleClocksSetting uint32 = 0x2
	ThrottleSWPowerCap    uint32 = 0x4
	ThrottleHWSlowdown    uint32 = 0x8
	ThrottleSyncBoost     uint32 = 0x10
	ThrottleSWThermal     uint32 = 0x20
	ThrottleHWThermal     uint32 = 0x40
	ThrottleHWPowerBrake  uint32 = 0x80
)

// SampleKind says how Value is to be read.
type SampleKind uint8

const (
	Gauge      SampleKind = iota // Value is the level at TimeNs
	Cumulative                   // Value is a monotonic cumulative counter since StartNs
)

// Sample is one metric point, normalized.
type Sample struct {
	Family    Family
	Metric    Metric
	Kind      SampleKind
	Model     string // engine family: model_name label
	Placement Placement
	TimeNs    uint64
	StartNs   uint64 // cumulative: the series start time (0 when unknown)
	Value     float64
}

// Reject is input that could not be used, with the reason. It is counted,
// sent to the dead-letter topic and recorded in the rejected-input table.
type Reject struct {
	Signal string // "traces", "metrics", "logs"
	Reason string // short machine-readable reason, e.g. "unmarshal", "no_timestamp"
	Detail string // human-readable detail
}

// Batch is everything one OTLP message normalized into.
type Batch struct {
	Requests []Request
	Steps    []Step
	Samples  []Sample
	Rejects  []Reject
	// Ignored counts points/spans that were understood but not used, by
	// reason (e.g. "unknown_metric", "non_request_span").
	Ignored map[string]int
}
