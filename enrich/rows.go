package enrich

import (
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

func strs(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// requestValues appends one request row's values to dst, in column order.
func requestValues(dst []any, r *join.Row, now time.Time) []any {
	return append(dst,
		r.UID, r.TraceID, r.SpanID, r.ParentSpanID, r.RequestID, r.Source, r.SpanName, r.Service, r.Model,
		r.Host, r.Pod, r.Namespace, r.ServiceInstance, r.Engine, r.GPU, r.GPUIndex,
		r.StartNs, r.EndNs, secs(r.StartNs), b2u(r.Error), r.FinishReason,
		r.E2EMs, r.TTFTMs, r.QueueMs, r.PrefillMs, r.DecodeMs, r.InferenceMs, r.TPOTMs, r.KVTransferMs,
		r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.MaxTokens,
		r.TimelineSource, r.ITLP50Ms, r.ITLP99Ms, r.ITLMaxMs, r.StallCount, r.StallMs, r.Retracts,
		r.EngineMatch, r.GPUMatch,
		r.RunningAtArrival, r.RunningAgeMs, r.WaitingAtArrival, r.WaitingAgeMs,
		r.KVUsageAtArrival, r.KVUsageMax, r.KVUsageAgeMs, r.PreemptionsDuring, r.PreemptAgeMs,
		r.PrefixHitRatio, r.PrefixAgeMs, r.EnginePromptTPS, r.EngineGenTPS, r.EngineTPSAgeMs,
		r.EngineMeanPromptTokens, r.EngineMeanOutputTokens,
		r.SMClockMinMHz, r.SMClockNormMHz, r.SMClockRatio, r.SMClockAgeMs,
		r.ThrottleReasons, r.ThrottleAgeMs, r.GPUTempMaxC, r.GPUTempAgeMs, r.PowerMaxW, r.PowerAgeMs,
		r.DRAMActiveMax, r.DRAMActiveAgeMs, r.PCIeBytesPerSMax, r.PCIeAgeMs, r.XIDLast, r.XIDAgeMs,
		strs(r.AttrKeys), strs(r.AttrValues), r.KafkaPartition, r.KafkaOffset, now,
	)
}

func stallValues(dst []any, s *join.Stall) []any {
	return append(dst,
		s.RequestUID, s.TraceID, s.Service, s.Model, s.Host, s.Pod, s.Engine, s.GPU, s.TokenIndex,
		s.StartNs, s.EndNs, secs(s.StartNs), s.DurationMs, s.Preemptions, s.Retracts, s.KVUsageMax,
		s.ThrottleReasons, s.SMClockMinMHz, s.XIDLast, s.EnginePromptTPS, strs(s.Events),
	)
}

func gpuSampleValues(dst []any, s *normalize.Sample) []any {
	return append(dst, s.Placement.Host, s.Placement.GPU, s.Placement.GPUIndex, s.Placement.Pod, s.Placement.Namespace,
		string(s.Metric), s.TimeNs, secs(s.TimeNs), s.Value)
}

func engineSampleValues(dst []any, s *normalize.Sample, delta, rate float64) []any {
	return append(dst, s.Placement.Host, s.Placement.Pod, s.Model, s.Placement.Engine, s.Placement.ServiceInstance,
		string(s.Metric), s.TimeNs, secs(s.TimeNs), s.Value, delta, rate)
}
