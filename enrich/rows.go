package enrich

import (
	"math"
	"time"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore"
)

// The destination tables and their column lists, in the order the row
// encoders below append values. They follow schemas/clickhouse/*.sql.
var (
	requestsTable = chstore.Table{Name: "requests", Columns: []string{
		"uid", "trace_id", "span_id", "parent_span_id", "request_id", "source", "span_name", "service", "model",
		"host", "pod", "namespace", "service_instance", "engine", "gpu", "gpu_index",
		"start_ns", "end_ns", "start_time", "error", "finish_reason",
		"e2e_ms", "ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "inference_ms", "tpot_ms", "kv_transfer_ms",
		"prompt_tokens", "completion_tokens", "cached_tokens", "max_tokens",
		"timeline_source", "itl_p50_ms", "itl_p99_ms", "itl_max_ms", "stall_count", "stall_ms", "retracts",
		"engine_match", "gpu_match",
		"running_at_arrival", "running_age_ms", "waiting_at_arrival", "waiting_age_ms",
		"kv_usage_at_arrival", "kv_usage_max", "kv_usage_age_ms", "preemptions_during", "preemptions_age_ms",
		"prefix_hit_ratio", "prefix_age_ms", "engine_prompt_tps", "engine_gen_tps", "engine_tps_age_ms",
		"engine_mean_prompt_tokens", "engine_mean_output_tokens",
		"sm_clock_min_mhz", "sm_clock_norm_mhz", "sm_clock_ratio", "sm_clock_age_ms",
		"throttle_reasons", "throttle_age_ms", "gpu_temp_max_c", "gpu_temp_age_ms", "power_max_w", "power_age_ms",
		"dram_active_max", "dram_active_age_ms", "pcie_bytes_per_s_max", "pcie_age_ms", "xid_last", "xid_age_ms",
		"attr_keys", "attr_values", "kafka_partition", "kafka_offset", "enriched_at",
	}}
	stallsTable = chstore.Table{Name: "token_stalls", Columns: []string{
		"request_uid", "trace_id", "service", "model", "host", "pod", "engine", "gpu", "token_index",
		"start_ns", "end_ns", "start_time", "duration_ms", "preemptions", "retracts", "kv_usage_max",
		"throttle_reasons", "sm_clock_min_mhz", "xid_last", "engine_prompt_tps", "events",
	}}
	gpuSamplesTable = chstore.Table{Name: "gpu_samples", Columns: []string{
		"host", "gpu", "gpu_index", "pod", "namespace", "metric", "time_ns", "time", "value",
	}}
	engineSamplesTable = chstore.Table{Name: "engine_samples", Columns: []string{
		"host", "pod", "model", "engine", "service_instance", "metric", "time_ns", "time", "value", "delta", "rate_per_s",
	}}
	rejectedTable = chstore.Table{Name: "rejected_input", Columns: []string{
		"received_at", "signal", "reason", "detail", "topic", "partition", "offset", "payload_bytes", "payload_prefix",
	}}
)

func secs(ns uint64) time.Time { return time.Unix(int64(ns/1e9), 0).UTC() }

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// rowEncoder turns rows of one table into insert values, in column order.
// Rows are cut from a shared backing array (one allocation per rowSlab
// rows, not one per row), and a value equal to the same column's value in
// the previous row reuses that row's boxed value: consecutive rows repeat
// most columns (host, pod, model, metric, scrape time, unknown features),
// and boxing each value was most of the encoding's allocations. Rows are
// never modified once encoded, so sharing their values is safe. The
// values are exactly the fields' (a float is reused only when its bits
// are the same: NaN for NaN, never -0 for 0).
type rowEncoder struct {
	cols       int
	slab       []any
	last       []any
	emptySlice any // []string{}: a nil array column
}

const rowSlab = 256

func newRowEncoder(t chstore.Table) *rowEncoder {
	n := len(t.Columns)
	return &rowEncoder{cols: n, last: make([]any, n), emptySlice: []string{}}
}

// next is an empty row of capacity e.cols.
func (e *rowEncoder) next() []any {
	if len(e.slab) < e.cols {
		e.slab = make([]any, e.cols*rowSlab)
	}
	r := e.slab[:0:e.cols]
	e.slab = e.slab[e.cols:]
	return r
}

// put appends vs, each as the next column of row.
func put[T comparable](e *rowEncoder, row []any, vs ...T) []any {
	for _, v := range vs {
		i := len(row)
		if p, ok := e.last[i].(T); ok && p == v {
			row = append(row, e.last[i])
			continue
		}
		b := any(v)
		e.last[i] = b
		row = append(row, b)
	}
	return row
}

// putFloat is put for float64 columns, comparing bits.
func putFloat(e *rowEncoder, row []any, vs ...float64) []any {
	for _, v := range vs {
		i := len(row)
		if p, ok := e.last[i].(float64); ok && math.Float64bits(p) == math.Float64bits(v) {
			row = append(row, e.last[i])
			continue
		}
		b := any(v)
		e.last[i] = b
		row = append(row, b)
	}
	return row
}

// putStrings appends an array column (nil as an empty array).
func (e *rowEncoder) putStrings(row []any, s []string) []any {
	if s == nil {
		return append(row, e.emptySlice)
	}
	return append(row, s)
}

// request encodes one request row.
func (e *rowEncoder) request(r *join.Row, now time.Time) []any {
	row := e.next()
	row = put(e, row, r.UID, r.TraceID, r.SpanID, r.ParentSpanID, r.RequestID, r.Source, r.SpanName, r.Service, r.Model,
		r.Host, r.Pod, r.Namespace, r.ServiceInstance, r.Engine, r.GPU, r.GPUIndex)
	row = put(e, row, r.StartNs, r.EndNs)
	row = put(e, row, secs(r.StartNs))
	row = put(e, row, b2u(r.Error))
	row = put(e, row, r.FinishReason)
	row = putFloat(e, row, r.E2EMs, r.TTFTMs, r.QueueMs, r.PrefillMs, r.DecodeMs, r.InferenceMs, r.TPOTMs, r.KVTransferMs)
	row = put(e, row, r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.MaxTokens)
	row = put(e, row, r.TimelineSource)
	row = putFloat(e, row, r.ITLP50Ms, r.ITLP99Ms, r.ITLMaxMs)
	row = put(e, row, r.StallCount)
	row = putFloat(e, row, r.StallMs)
	row = put(e, row, r.Retracts)
	row = put(e, row, r.EngineMatch, r.GPUMatch)
	row = putFloat(e, row, r.RunningAtArrival, r.RunningAgeMs, r.WaitingAtArrival, r.WaitingAgeMs,
		r.KVUsageAtArrival, r.KVUsageMax, r.KVUsageAgeMs, r.PreemptionsDuring, r.PreemptAgeMs,
		r.PrefixHitRatio, r.PrefixAgeMs, r.EnginePromptTPS, r.EngineGenTPS, r.EngineTPSAgeMs,
		r.EngineMeanPromptTokens, r.EngineMeanOutputTokens,
		r.SMClockMinMHz, r.SMClockNormMHz, r.SMClockRatio, r.SMClockAgeMs)
	row = put(e, row, r.ThrottleReasons)
	row = putFloat(e, row, r.ThrottleAgeMs, r.GPUTempMaxC, r.GPUTempAgeMs, r.PowerMaxW, r.PowerAgeMs,
		r.DRAMActiveMax, r.DRAMActiveAgeMs, r.PCIeBytesPerSMax, r.PCIeAgeMs)
	row = put(e, row, r.XIDLast)
	row = putFloat(e, row, r.XIDAgeMs)
	row = e.putStrings(row, r.AttrKeys)
	row = e.putStrings(row, r.AttrValues)
	row = put(e, row, r.KafkaPartition)
	row = put(e, row, r.KafkaOffset)
	return put(e, row, now)
}

// stall encodes one token_stalls row.
func (e *rowEncoder) stall(s *join.Stall) []any {
	row := e.next()
	row = put(e, row, s.RequestUID, s.TraceID, s.Service, s.Model, s.Host, s.Pod, s.Engine, s.GPU)
	row = put(e, row, s.TokenIndex)
	row = put(e, row, s.StartNs, s.EndNs)
	row = put(e, row, secs(s.StartNs))
	row = putFloat(e, row, s.DurationMs, s.Preemptions)
	row = put(e, row, s.Retracts)
	row = putFloat(e, row, s.KVUsageMax)
	row = put(e, row, s.ThrottleReasons)
	row = putFloat(e, row, s.SMClockMinMHz)
	row = put(e, row, s.XIDLast)
	row = putFloat(e, row, s.EnginePromptTPS)
	return e.putStrings(row, s.Events)
}

// gpuSample encodes one gpu_samples row.
func (e *rowEncoder) gpuSample(s *normalize.Sample) []any {
	row := e.next()
	row = put(e, row, s.Placement.Host, s.Placement.GPU, s.Placement.GPUIndex, s.Placement.Pod, s.Placement.Namespace,
		string(s.Metric))
	row = put(e, row, s.TimeNs)
	row = put(e, row, secs(s.TimeNs))
	return putFloat(e, row, s.Value)
}

// engineSample encodes one engine_samples row.
func (e *rowEncoder) engineSample(s *normalize.Sample, delta, rate float64) []any {
	row := e.next()
	row = put(e, row, s.Placement.Host, s.Placement.Pod, s.Model, s.Placement.Engine, s.Placement.ServiceInstance,
		string(s.Metric))
	row = put(e, row, s.TimeNs)
	row = put(e, row, secs(s.TimeNs))
	return putFloat(e, row, s.Value, delta, rate)
}
