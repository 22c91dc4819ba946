package join

// Row is one enriched request: a row of the requests table. Field order
// and names follow schemas/clickhouse/0001_base.sql; NaN means unknown.
type Row struct {
	UID, TraceID, SpanID, ParentSpanID, RequestID string
	Source, SpanName, Service, Model              string
	Host, Pod, Namespace, ServiceInstance         string
	Engine, GPU, GPUIndex                         string
	StartNs, EndNs                                uint64
	Error                                         bool
	FinishReason                                  string

	E2EMs, TTFTMs, QueueMs, PrefillMs, DecodeMs, InferenceMs, TPOTMs, KVTransferMs float64

	PromptTokens, CompletionTokens, CachedTokens, MaxTokens int64

	TimelineSource               string
	ITLP50Ms, ITLP99Ms, ITLMaxMs float64
	StallCount                   uint32
	StallMs                      float64
	Retracts                     uint32
	EngineMatch, GPUMatch        string

	RunningAtArrival, RunningAgeMs  float64
	WaitingAtArrival, WaitingAgeMs  float64
	KVUsageAtArrival, KVUsageMax    float64
	KVUsageAgeMs                    float64
	PreemptionsDuring, PreemptAgeMs float64
	PrefixHitRatio, PrefixAgeMs     float64
	EnginePromptTPS, EngineGenTPS   float64
	EngineTPSAgeMs                  float64
	// Counter features (preemptions, prefix hits/queries, token rates) take
	// each overlapping scrape interval's delta in the share of the interval
	// the request's lifetime covers. The engine's workload mix while the
	// request ran: prompt and output tokens per finished request, both
	// apportioned that way.
	EngineMeanPromptTokens, EngineMeanOutputTokens float64
	// The token-weighted mean size (tokens) of the engine's steps over the
	// scrape intervals the request ran through (vllm:iteration_tokens_total,
	// whole deltas): large prefills batched with its decodes raise it.
	EngineStepTokens               float64
	SMClockMinMHz, SMClockNormMHz  float64
	SMClockRatio, SMClockAgeMs     float64
	ThrottleReasons                uint32
	ThrottleAgeMs                  float64
	GPUTempMaxC, GPUTempAgeMs      float64
	PowerMaxW, PowerAgeMs          float64
	DRAMActiveMax, DRAMActiveAgeMs float64
	PCIeBytesPerSMax, PCIeAgeMs    float64
	XIDLast                        uint32
	XIDAgeMs                       float64

	AttrKeys, AttrValues []string
	KafkaPartition       int32
	KafkaOffset          int64
}

// Stall is one stall interval of a request's token timeline (a row of the
// token_stalls table) with the engine and GPU events that overlapped it.
type Stall struct {
	RequestUID, TraceID, Service, Model string
	Host, Pod, Engine, GPU              string
	TokenIndex                          uint32
	StartNs, EndNs                      uint64
	DurationMs                          float64
	Preemptions                         float64
	Retracts                            uint32
	KVUsageMax                          float64
	ThrottleReasons                     uint32
	SMClockMinMHz                       float64
	XIDLast                             uint32
	EnginePromptTPS                     float64
	Events                              []string
}
