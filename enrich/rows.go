package enrich

import (
	"time"

	"github.com/tailcause/tailcause/enrich/join"
	"github.com/tailcause/tailcause/enrich/normalize"
	"github.com/tailcause/tailcause/internal/chstore"
)

// The destination tables, each declared once as its columns in insert
// order with the field each column holds (they follow
// schemas/clickhouse/*.sql). The sink encodes rows into columnar blocks
// (blockEncoder): one typed slice per column, kept between batches, that
// chstore.Store.InsertBlock hands to clickhouse-go a column at a time.
var (
	requestsTable      = tableOf("requests", requestCols)
	stallsTable        = tableOf("token_stalls", stallCols)
	gpuSamplesTable    = tableOf("gpu_samples", gpuSampleCols)
	engineSamplesTable = tableOf("engine_samples", engineSampleCols)
	// rejected_input rows are built as []any (rejectRow) and written
	// through chstore.RowBlock: they are few.
	rejectedTable = chstore.Table{Name: "rejected_input", Columns: []string{
		"received_at", "signal", "reason", "detail", "topic", "partition", "offset", "payload_bytes", "payload_prefix",
	}}
)

// requestIn is what a request row is made of: the joined row and the time
// it was enriched.
type requestIn struct {
	*join.Row
	enrichedAt time.Time
}

// engineIn is what an engine_samples row is made of: the sample and its
// counter delta and rate (NaN when none).
type engineIn struct {
	*normalize.Sample
	delta, rate float64
}

var requestCols = []colSpec[requestIn]{
	col("uid", func(x *requestIn) string { return x.UID }),
	col("trace_id", func(x *requestIn) string { return x.TraceID }),
	col("span_id", func(x *requestIn) string { return x.SpanID }),
	col("parent_span_id", func(x *requestIn) string { return x.ParentSpanID }),
	col("request_id", func(x *requestIn) string { return x.RequestID }),
	col("source", func(x *requestIn) string { return x.Source }),
	col("span_name", func(x *requestIn) string { return x.SpanName }),
	col("service", func(x *requestIn) string { return x.Service }),
	col("model", func(x *requestIn) string { return x.Model }),
	col("host", func(x *requestIn) string { return x.Host }),
	col("pod", func(x *requestIn) string { return x.Pod }),
	col("namespace", func(x *requestIn) string { return x.Namespace }),
	col("service_instance", func(x *requestIn) string { return x.ServiceInstance }),
	col("engine", func(x *requestIn) string { return x.Engine }),
	col("gpu", func(x *requestIn) string { return x.GPU }),
	col("gpu_index", func(x *requestIn) string { return x.GPUIndex }),
	col("start_ns", func(x *requestIn) uint64 { return x.StartNs }),
	col("end_ns", func(x *requestIn) uint64 { return x.EndNs }),
	col("start_time", func(x *requestIn) time.Time { return secs(x.StartNs) }),
	col("error", func(x *requestIn) uint8 { return b2u(x.Error) }),
	col("finish_reason", func(x *requestIn) string { return x.FinishReason }),
	col("e2e_ms", func(x *requestIn) float64 { return x.E2EMs }),
	col("ttft_ms", func(x *requestIn) float64 { return x.TTFTMs }),
	col("queue_ms", func(x *requestIn) float64 { return x.QueueMs }),
	col("prefill_ms", func(x *requestIn) float64 { return x.PrefillMs }),
	col("decode_ms", func(x *requestIn) float64 { return x.DecodeMs }),
	col("inference_ms", func(x *requestIn) float64 { return x.InferenceMs }),
	col("tpot_ms", func(x *requestIn) float64 { return x.TPOTMs }),
	col("kv_transfer_ms", func(x *requestIn) float64 { return x.KVTransferMs }),
	col("prompt_tokens", func(x *requestIn) int64 { return x.PromptTokens }),
	col("completion_tokens", func(x *requestIn) int64 { return x.CompletionTokens }),
	col("cached_tokens", func(x *requestIn) int64 { return x.CachedTokens }),
	col("max_tokens", func(x *requestIn) int64 { return x.MaxTokens }),
	col("timeline_source", func(x *requestIn) string { return x.TimelineSource }),
	col("itl_p50_ms", func(x *requestIn) float64 { return x.ITLP50Ms }),
	col("itl_p99_ms", func(x *requestIn) float64 { return x.ITLP99Ms }),
	col("itl_max_ms", func(x *requestIn) float64 { return x.ITLMaxMs }),
	col("stall_count", func(x *requestIn) uint32 { return x.StallCount }),
	col("stall_ms", func(x *requestIn) float64 { return x.StallMs }),
	col("retracts", func(x *requestIn) uint32 { return x.Retracts }),
	col("engine_match", func(x *requestIn) string { return x.EngineMatch }),
	col("gpu_match", func(x *requestIn) string { return x.GPUMatch }),
	col("running_at_arrival", func(x *requestIn) float64 { return x.RunningAtArrival }),
	col("running_age_ms", func(x *requestIn) float64 { return x.RunningAgeMs }),
	col("waiting_at_arrival", func(x *requestIn) float64 { return x.WaitingAtArrival }),
	col("waiting_age_ms", func(x *requestIn) float64 { return x.WaitingAgeMs }),
	col("kv_usage_at_arrival", func(x *requestIn) float64 { return x.KVUsageAtArrival }),
	col("kv_usage_max", func(x *requestIn) float64 { return x.KVUsageMax }),
	col("kv_usage_age_ms", func(x *requestIn) float64 { return x.KVUsageAgeMs }),
	col("preemptions_during", func(x *requestIn) float64 { return x.PreemptionsDuring }),
	col("preemptions_age_ms", func(x *requestIn) float64 { return x.PreemptAgeMs }),
	col("prefix_hit_ratio", func(x *requestIn) float64 { return x.PrefixHitRatio }),
	col("prefix_age_ms", func(x *requestIn) float64 { return x.PrefixAgeMs }),
	col("engine_prompt_tps", func(x *requestIn) float64 { return x.EnginePromptTPS }),
	col("engine_gen_tps", func(x *requestIn) float64 { return x.EngineGenTPS }),
	col("engine_tps_age_ms", func(x *requestIn) float64 { return x.EngineTPSAgeMs }),
	col("engine_mean_prompt_tokens", func(x *requestIn) float64 { return x.EngineMeanPromptTokens }),
	col("engine_mean_output_tokens", func(x *requestIn) float64 { return x.EngineMeanOutputTokens }),
	col("engine_step_tokens", func(x *requestIn) float64 { return x.EngineStepTokens }),
	col("sm_clock_min_mhz", func(x *requestIn) float64 { return x.SMClockMinMHz }),
	col("sm_clock_norm_mhz", func(x *requestIn) float64 { return x.SMClockNormMHz }),
	col("sm_clock_ratio", func(x *requestIn) float64 { return x.SMClockRatio }),
	col("sm_clock_age_ms", func(x *requestIn) float64 { return x.SMClockAgeMs }),
	col("throttle_reasons", func(x *requestIn) uint32 { return x.ThrottleReasons }),
	col("throttle_age_ms", func(x *requestIn) float64 { return x.ThrottleAgeMs }),
	col("gpu_temp_max_c", func(x *requestIn) float64 { return x.GPUTempMaxC }),
	col("gpu_temp_age_ms", func(x *requestIn) float64 { return x.GPUTempAgeMs }),
	col("power_max_w", func(x *requestIn) float64 { return x.PowerMaxW }),
	col("power_age_ms", func(x *requestIn) float64 { return x.PowerAgeMs }),
	col("dram_active_max", func(x *requestIn) float64 { return x.DRAMActiveMax }),
	col("dram_active_age_ms", func(x *requestIn) float64 { return x.DRAMActiveAgeMs }),
	col("pcie_bytes_per_s_max", func(x *requestIn) float64 { return x.PCIeBytesPerSMax }),
	col("pcie_age_ms", func(x *requestIn) float64 { return x.PCIeAgeMs }),
	col("xid_last", func(x *requestIn) uint32 { return x.XIDLast }),
	col("xid_age_ms", func(x *requestIn) float64 { return x.XIDAgeMs }),
	col("attr_keys", func(x *requestIn) []string { return strs(x.AttrKeys) }),
	col("attr_values", func(x *requestIn) []string { return strs(x.AttrValues) }),
	col("kafka_partition", func(x *requestIn) int32 { return x.KafkaPartition }),
	col("kafka_offset", func(x *requestIn) int64 { return x.KafkaOffset }),
	col("enriched_at", func(x *requestIn) time.Time { return x.enrichedAt }),
}

var stallCols = []colSpec[join.Stall]{
	col("request_uid", func(x *join.Stall) string { return x.RequestUID }),
	col("trace_id", func(x *join.Stall) string { return x.TraceID }),
	col("service", func(x *join.Stall) string { return x.Service }),
	col("model", func(x *join.Stall) string { return x.Model }),
	col("host", func(x *join.Stall) string { return x.Host }),
	col("pod", func(x *join.Stall) string { return x.Pod }),
	col("engine", func(x *join.Stall) string { return x.Engine }),
	col("gpu", func(x *join.Stall) string { return x.GPU }),
	col("token_index", func(x *join.Stall) uint32 { return x.TokenIndex }),
	col("start_ns", func(x *join.Stall) uint64 { return x.StartNs }),
	col("end_ns", func(x *join.Stall) uint64 { return x.EndNs }),
	col("start_time", func(x *join.Stall) time.Time { return secs(x.StartNs) }),
	col("duration_ms", func(x *join.Stall) float64 { return x.DurationMs }),
	col("preemptions", func(x *join.Stall) float64 { return x.Preemptions }),
	col("retracts", func(x *join.Stall) uint32 { return x.Retracts }),
	col("kv_usage_max", func(x *join.Stall) float64 { return x.KVUsageMax }),
	col("throttle_reasons", func(x *join.Stall) uint32 { return x.ThrottleReasons }),
	col("sm_clock_min_mhz", func(x *join.Stall) float64 { return x.SMClockMinMHz }),
	col("xid_last", func(x *join.Stall) uint32 { return x.XIDLast }),
	col("engine_prompt_tps", func(x *join.Stall) float64 { return x.EnginePromptTPS }),
	col("events", func(x *join.Stall) []string { return strs(x.Events) }),
}

var gpuSampleCols = []colSpec[normalize.Sample]{
	col("host", func(x *normalize.Sample) string { return x.Placement.Host }),
	col("gpu", func(x *normalize.Sample) string { return x.Placement.GPU }),
	col("gpu_index", func(x *normalize.Sample) string { return x.Placement.GPUIndex }),
	col("pod", func(x *normalize.Sample) string { return x.Placement.Pod }),
	col("namespace", func(x *normalize.Sample) string { return x.Placement.Namespace }),
	col("metric", func(x *normalize.Sample) string { return string(x.Metric) }),
	col("time_ns", func(x *normalize.Sample) uint64 { return x.TimeNs }),
	col("time", func(x *normalize.Sample) time.Time { return secs(x.TimeNs) }),
	col("value", func(x *normalize.Sample) float64 { return x.Value }),
}

var engineSampleCols = []colSpec[engineIn]{
	col("host", func(x *engineIn) string { return x.Placement.Host }),
	col("pod", func(x *engineIn) string { return x.Placement.Pod }),
	col("model", func(x *engineIn) string { return x.Model }),
	col("engine", func(x *engineIn) string { return x.Placement.Engine }),
	col("service_instance", func(x *engineIn) string { return x.Placement.ServiceInstance }),
	col("metric", func(x *engineIn) string { return string(x.Metric) }),
	col("time_ns", func(x *engineIn) uint64 { return x.TimeNs }),
	col("time", func(x *engineIn) time.Time { return secs(x.TimeNs) }),
	col("value", func(x *engineIn) float64 { return x.Value }),
	col("delta", func(x *engineIn) float64 { return x.delta }),
	col("rate_per_s", func(x *engineIn) float64 { return x.rate }),
}

func secs(ns uint64) time.Time { return time.Unix(int64(ns/1e9), 0).UTC() }

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// noStrings is a nil array column's value: an empty array. It is shared
// and never appended to.
var noStrings = []string{}

func strs(s []string) []string {
	if s == nil {
		return noStrings
	}
	return s
}

// colSpec is a column of a table of rows made of R: its name and its
// buffer's constructor.
type colSpec[R any] struct {
	name string
	new  func() colBuffer[R]
}

// col is the column name holding get(row), a T.
func col[R, T any](name string, get func(*R) T) colSpec[R] {
	return colSpec[R]{name: name, new: func() colBuffer[R] { return &values[R, T]{get: get} }}
}

// colBuffer is one column of a blockEncoder.
type colBuffer[R any] interface {
	add(r *R)
	column() chstore.Column
	reset()
}

type values[R, T any] struct {
	get func(*R) T
	v   []T
}

func (c *values[R, T]) add(r *R)               { c.v = append(c.v, c.get(r)) }
func (c *values[R, T]) column() chstore.Column { return chstore.Values[T](c.v) }
func (c *values[R, T]) reset()                 { clear(c.v); c.v = c.v[:0] }

func tableOf[R any](name string, cols []colSpec[R]) chstore.Table {
	t := chstore.Table{Name: name}
	for _, c := range cols {
		t.Columns = append(t.Columns, c.name)
	}
	return t
}

// blockEncoder turns rows made of R into a columnar block of their table.
// Its buffers are kept from one block to the next (reset): a block's
// columns alias them, so a block is the caller's only until the next reset.
// The values are exactly the fields' (NaN stays NaN, -0 stays -0; a nil
// array is an empty one).
type blockEncoder[R any] struct {
	cols []colBuffer[R]
	n    int
}

func newBlockEncoder[R any](cols []colSpec[R]) *blockEncoder[R] {
	e := &blockEncoder[R]{cols: make([]colBuffer[R], len(cols))}
	for i, c := range cols {
		e.cols[i] = c.new()
	}
	return e
}

// add appends one row.
func (e *blockEncoder[R]) add(r *R) {
	for _, c := range e.cols {
		c.add(r)
	}
	e.n++
}

// len is the number of rows since the last reset.
func (e *blockEncoder[R]) len() int { return e.n }

// block is the rows since the last reset, valid until the next.
func (e *blockEncoder[R]) block() chstore.Block {
	b := make(chstore.Block, len(e.cols))
	for i, c := range e.cols {
		b[i] = c.column()
	}
	return b
}

// reset empties the encoder, keeping its buffers (and dropping their
// references to the rows' strings).
func (e *blockEncoder[R]) reset() {
	for _, c := range e.cols {
		c.reset()
	}
	e.n = 0
}
