package normalize

import (
	"fmt"
	"math"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Ignored reasons for metric points.
const (
	IgnoredUnknownMetric   = "unknown_metric"    // a name no adapter maps
	IgnoredHistogram       = "histogram"         // histogram / exponential histogram points
	IgnoredSummary         = "summary"           // summary points
	IgnoredDeltaSum        = "delta_sum"         // delta-temporality sums (Prometheus never sends them)
	IgnoredNoRecordedValue = "no_recorded_value" // Prometheus staleness markers
	IgnoredNoValue         = "no_value"          // empty, NaN or infinite values
)

// metricSpec says how a source metric maps onto the canonical model.
type metricSpec struct {
	family Family
	metric Metric
	kind   SampleKind
	// percent: the source reports 0-100; the model wants 0-1.
	percent bool
	// sumLabels: the source splits the series by a label the model does not
	// keep (DCGM_EXP_XID_ERRORS_*{xid}); points of one placement and time
	// are summed.
	sumLabels bool
	// hist: a cumulative histogram of tokens per engine step; each point
	// gives two Cumulative samples, MetricStepTokens and MetricStepTokensSq
	// (metric is unused).
	hist bool
}

// lookupMetric maps a source metric name. Names may arrive with or without
// the "_total" suffix (the prometheus receiver's trim_metric_suffixes), and
// under the names older releases used.
func lookupMetric(name string) (metricSpec, bool) {
	eng := func(m Metric, k SampleKind) (metricSpec, bool) {
		return metricSpec{family: FamilyEngine, metric: m, kind: k}, true
	}
	gpu := func(m Metric, k SampleKind) (metricSpec, bool) {
		return metricSpec{family: FamilyGPU, metric: m, kind: k}, true
	}
	switch strings.TrimSuffix(name, "_total") {
	// vLLM (V1; V0 names where they differ).
	case "vllm:num_requests_running":
		return eng(MetricRunning, Gauge)
	case "vllm:num_requests_waiting":
		return eng(MetricWaiting, Gauge)
	case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc":
		return eng(MetricKVUsage, Gauge) // a 0-1 fraction despite the name
	case "vllm:num_preemptions":
		return eng(MetricPreemptions, Cumulative)
	case "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries":
		return eng(MetricPrefixQueries, Cumulative)
	case "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits":
		return eng(MetricPrefixHits, Cumulative)
	case "vllm:gpu_prefix_cache_hit_rate":
		return eng(MetricPrefixHitRate, Gauge)
	case "vllm:prompt_tokens":
		return eng(MetricPromptTokens, Cumulative)
	case "vllm:generation_tokens":
		return eng(MetricGenerationTokens, Cumulative)
	case "vllm:prompt_tokens_recomputed":
		return eng(MetricRecomputedTokens, Cumulative)
	case "vllm:iteration_tokens":
		return metricSpec{family: FamilyEngine, kind: Cumulative, hist: true}, true
	case "vllm:request_success":
		// Split by finished_reason; the model keeps one series per engine.
		return metricSpec{family: FamilyEngine, metric: MetricRequestSuccess, kind: Cumulative, sumLabels: true}, true

	// SGLang.
	case "sglang:num_running_reqs":
		return eng(MetricRunning, Gauge)
	case "sglang:num_queue_reqs":
		return eng(MetricWaiting, Gauge)
	case "sglang:token_usage":
		return eng(MetricKVUsage, Gauge)
	case "sglang:cache_hit_rate":
		return eng(MetricPrefixHitRate, Gauge)
	case "sglang:num_retracted_requests":
		return eng(MetricPreemptions, Cumulative)
	case "sglang:prompt_tokens":
		return eng(MetricPromptTokens, Cumulative)
	case "sglang:generation_tokens":
		return eng(MetricGenerationTokens, Cumulative)
	case "sglang:cached_tokens":
		return eng(MetricPrefixHits, Cumulative) // prompt tokens served from the radix cache

	// TGI.
	case "tgi_queue_size":
		return eng(MetricWaiting, Gauge)
	case "tgi_batch_current_size":
		return eng(MetricBatchSize, Gauge)

	// dcgm-exporter.
	case "DCGM_FI_DEV_SM_CLOCK":
		return gpu(MetricSMClock, Gauge)
	case "DCGM_FI_DEV_MEM_CLOCK":
		return gpu(MetricMemClock, Gauge)
	case "DCGM_FI_DEV_GPU_TEMP":
		return gpu(MetricGPUTemp, Gauge)
	case "DCGM_FI_DEV_MEMORY_TEMP":
		return gpu(MetricMemTemp, Gauge)
	case "DCGM_FI_DEV_POWER_USAGE":
		return gpu(MetricPower, Gauge)
	case "DCGM_FI_DEV_GPU_UTIL":
		return metricSpec{family: FamilyGPU, metric: MetricGPUUtil, kind: Gauge, percent: true}, true
	case "DCGM_FI_DEV_MEM_COPY_UTIL":
		return metricSpec{family: FamilyGPU, metric: MetricMemCopyUtil, kind: Gauge, percent: true}, true
	case "DCGM_FI_DEV_FB_USED":
		return gpu(MetricFBUsed, Gauge)
	case "DCGM_FI_DEV_FB_FREE":
		return gpu(MetricFBFree, Gauge)
	case "DCGM_FI_DEV_XID_ERRORS":
		return gpu(MetricXID, Gauge) // the last XID code, not a count
	case "DCGM_FI_DEV_PCIE_REPLAY_COUNTER":
		return gpu(MetricPCIeReplay, Cumulative)
	case "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL":
		return gpu(MetricNVLinkBytes, Cumulative)
	case "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
		return gpu(MetricGREngineActive, Gauge)
	case "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":
		return gpu(MetricTensorActive, Gauge)
	case "DCGM_FI_PROF_DRAM_ACTIVE":
		return gpu(MetricDRAMActive, Gauge)
	case "DCGM_FI_PROF_SM_ACTIVE":
		return gpu(MetricSMActive, Gauge)
	case "DCGM_FI_PROF_SM_OCCUPANCY":
		return gpu(MetricSMOccupancy, Gauge)
	case "DCGM_FI_PROF_PCIE_TX_BYTES":
		return gpu(MetricPCIeTx, Gauge)
	case "DCGM_FI_PROF_PCIE_RX_BYTES":
		return gpu(MetricPCIeRx, Gauge)
	case "DCGM_FI_DEV_POWER_VIOLATION":
		return gpu(MetricPowerViolation, Cumulative)
	case "DCGM_FI_DEV_THERMAL_VIOLATION":
		return gpu(MetricThermalViolation, Cumulative)
	case "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS":
		return gpu(MetricClockReasons, Gauge)
	case "DCGM_EXP_XID_ERRORS_COUNT":
		// A gauge in dcgm-exporter: XID errors within its window, per xid.
		return metricSpec{family: FamilyGPU, metric: MetricXIDCount, kind: Gauge, sumLabels: true}, true
	case "DCGM_EXP_XID_ERRORS_TOTAL":
		return metricSpec{family: FamilyGPU, metric: MetricXIDTotal, kind: Cumulative, sumLabels: true}, true
	}
	return metricSpec{}, false
}

// metricRes is what a metrics resource says, computed once per resource.
type metricRes struct {
	// engine is the placement of engine metrics: the scraped target.
	engine Placement
	// host is the fallback host of GPU metrics without a Hostname label.
	// The exporter runs on the GPU's node, so its host and node name are
	// the GPU's; its pod and namespace are not.
	host string
}

func newMetricRes(res pcommon.Resource) metricRes {
	var pb placementBuilder
	var addr string
	for k, v := range res.Attributes().All() {
		if pb.attr(k, pdataValue(v)) {
			continue
		}
		if k == attrServerAddress {
			addr = v.AsString()
		}
	}
	return pb.metricRes(addr)
}

// metricRes is the resource of metrics with these placement attributes
// and server.address addr.
func (b *placementBuilder) metricRes(addr string) metricRes {
	p := b.placement()
	host := p.Host
	if p.Host == "" {
		p.Host = addr
	}
	return metricRes{engine: p, host: host}
}

type metricNormalizer struct {
	out Batch
}

// Metrics normalizes one OTLP metrics message into Samples. Unknown metric
// names, histograms (but vLLM's step-size histogram, two counters per
// point: histSamples) and summaries are counted in Ignored, never errors;
// points without a timestamp are rejected. The Batch does not alias md.
func Metrics(md pmetric.Metrics) Batch {
	n := metricNormalizer{}
	n.out.Samples = make([]Sample, 0, md.DataPointCount())
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		res := newMetricRes(rm.Resource())
		sms := rm.ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				n.metric(ms.At(k), &res)
			}
		}
	}
	return n.out
}

func (n *metricNormalizer) ignore(reason string, points int) {
	if points <= 0 {
		return
	}
	if n.out.Ignored == nil {
		n.out.Ignored = make(map[string]int)
	}
	n.out.Ignored[reason] += points
}

func (n *metricNormalizer) reject(reason, detail string) {
	if len(n.out.Rejects) >= maxRejects {
		n.ignore(IgnoredRejectsDropped, 1)
		return
	}
	n.out.Rejects = append(n.out.Rejects, Reject{Signal: "metrics", Reason: reason, Detail: detail})
}

// metricShape is what normalization reads of a metric before its points:
// its data type, name and point count, and whether it is a delta sum (or
// a delta histogram).
type metricShape struct {
	typ      pmetric.MetricType
	name     string
	points   int
	deltaSum bool
}

// start classifies a metric: spec and useStart for its points, or ok false
// when they are all ignored (counted here).
func (n *metricNormalizer) start(m metricShape) (spec metricSpec, useStart, ok bool) {
	switch m.typ {
	case pmetric.MetricTypeGauge, pmetric.MetricTypeSum:
	case pmetric.MetricTypeHistogram:
		spec, ok = lookupMetric(m.name)
		if !ok || !spec.hist {
			n.ignore(IgnoredHistogram, m.points)
			return metricSpec{}, false, false
		}
		if m.deltaSum {
			n.ignore(IgnoredDeltaSum, m.points)
			return metricSpec{}, false, false
		}
		return spec, true, true
	case pmetric.MetricTypeExponentialHistogram:
		n.ignore(IgnoredHistogram, m.points)
		return metricSpec{}, false, false
	case pmetric.MetricTypeSummary:
		n.ignore(IgnoredSummary, m.points)
		return metricSpec{}, false, false
	default:
		n.ignore(IgnoredNoValue, 1)
		return metricSpec{}, false, false
	}
	spec, ok = lookupMetric(m.name)
	if !ok || spec.hist {
		n.ignore(IgnoredUnknownMetric, m.points)
		return metricSpec{}, false, false
	}
	sum := m.typ == pmetric.MetricTypeSum
	if sum && m.deltaSum {
		n.ignore(IgnoredDeltaSum, m.points)
		return metricSpec{}, false, false
	}
	// The canonical kind wins over the wire type: a counter scraped without
	// type metadata arrives as a gauge but is still cumulative (start
	// unknown), and a gauge never has a series start.
	return spec, spec.kind == Cumulative && sum, true
}

// numberPoint is what normalization reads of a number data point.
type numberPoint struct {
	flags     pmetric.DataPointFlags
	valueType pmetric.NumberDataPointValueType
	intValue  int64
	dblValue  float64
	time      uint64
	start     uint64
}

// sample is point p (index p of metric name) as a Sample without its
// placement, or ok false when it is ignored or rejected (counted here).
func (n *metricNormalizer) sample(spec metricSpec, useStart bool, name string, p int, dp numberPoint) (Sample, bool) {
	if dp.flags.NoRecordedValue() {
		n.ignore(IgnoredNoRecordedValue, 1)
		return Sample{}, false
	}
	var v float64
	switch dp.valueType {
	case pmetric.NumberDataPointValueTypeInt:
		v = float64(dp.intValue)
	case pmetric.NumberDataPointValueTypeDouble:
		v = dp.dblValue
	default:
		n.ignore(IgnoredNoValue, 1)
		return Sample{}, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		n.ignore(IgnoredNoValue, 1)
		return Sample{}, false
	}
	if dp.time == 0 {
		n.reject("no_timestamp", fmt.Sprintf("metric %q point %d: zero timestamp",
			truncUTF8(name, maxSpanNameInDetail), p))
		return Sample{}, false
	}
	if spec.percent {
		v /= 100
	}
	s := Sample{
		Family: spec.family,
		Metric: spec.metric,
		Kind:   spec.kind,
		TimeNs: dp.time,
		Value:  v,
	}
	if useStart {
		s.StartNs = dp.start
	}
	return s, true
}

// histPoint is what normalization reads of a histogram data point.
type histPoint struct {
	flags       pmetric.DataPointFlags
	time, start uint64
	bounds      []float64 // explicit bounds, ascending
	counts      []uint64  // per bucket (not cumulative), len(bounds)+1
}

// histSamples is point p of a step-size histogram (spec.hist) as its two
// Cumulative samples without their placement (MetricStepTokens,
// MetricStepTokensSq), or ok false when it is ignored or rejected (counted
// here). A bucket stands for its upper bound, the +Inf bucket for twice the
// last bound.
func (n *metricNormalizer) histSamples(name string, p int, hp *histPoint) (sum, sq Sample, ok bool) {
	if hp.flags.NoRecordedValue() {
		n.ignore(IgnoredNoRecordedValue, 1)
		return sum, sq, false
	}
	if hp.time == 0 {
		n.reject("no_timestamp", fmt.Sprintf("metric %q point %d: zero timestamp",
			truncUTF8(name, maxSpanNameInDetail), p))
		return sum, sq, false
	}
	nb := len(hp.bounds)
	if nb == 0 || len(hp.counts) != nb+1 {
		n.ignore(IgnoredNoValue, 1)
		return sum, sq, false
	}
	for i, b := range hp.bounds {
		if !(b > 0) || math.IsInf(b, 0) || i > 0 && b <= hp.bounds[i-1] {
			n.ignore(IgnoredNoValue, 1)
			return sum, sq, false
		}
	}
	var tot, tot2 float64
	for i, c := range hp.counts {
		le := 2 * hp.bounds[nb-1]
		if i < nb {
			le = hp.bounds[i]
		}
		tot += float64(c) * le
		tot2 += float64(c) * le * le
	}
	sum = Sample{Family: FamilyEngine, Metric: MetricStepTokens, Kind: Cumulative, TimeNs: hp.time, StartNs: hp.start, Value: tot}
	sq = sum
	sq.Metric, sq.Value = MetricStepTokensSq, tot2
	return sum, sq, true
}

// finish ends a metric whose samples start at index first.
func (n *metricNormalizer) finish(spec metricSpec, first int) {
	if spec.sumLabels {
		n.out.Samples = append(n.out.Samples[:first], sumSamples(n.out.Samples[first:])...)
	}
}

func (n *metricNormalizer) metric(m pmetric.Metric, res *metricRes) {
	shape := metricShape{typ: m.Type(), name: m.Name()}
	var points pmetric.NumberDataPointSlice
	switch shape.typ {
	case pmetric.MetricTypeGauge:
		points = m.Gauge().DataPoints()
		shape.points = points.Len()
	case pmetric.MetricTypeSum:
		points = m.Sum().DataPoints()
		shape.points = points.Len()
		shape.deltaSum = m.Sum().AggregationTemporality() == pmetric.AggregationTemporalityDelta
	case pmetric.MetricTypeHistogram:
		shape.points = m.Histogram().DataPoints().Len()
		shape.deltaSum = m.Histogram().AggregationTemporality() == pmetric.AggregationTemporalityDelta
	case pmetric.MetricTypeExponentialHistogram:
		shape.points = m.ExponentialHistogram().DataPoints().Len()
	case pmetric.MetricTypeSummary:
		shape.points = m.Summary().DataPoints().Len()
	}
	spec, useStart, ok := n.start(shape)
	if !ok {
		return
	}
	if spec.hist {
		n.histogram(m.Histogram().DataPoints(), shape.name, res)
		return
	}
	first := len(n.out.Samples)
	for p := 0; p < points.Len(); p++ {
		dp := points.At(p)
		s, ok := n.sample(spec, useStart, shape.name, p, numberPoint{
			flags:     dp.Flags(),
			valueType: dp.ValueType(),
			intValue:  dp.IntValue(),
			dblValue:  dp.DoubleValue(),
			time:      uint64(dp.Timestamp()),
			start:     uint64(dp.StartTimestamp()),
		})
		if !ok {
			continue
		}
		if spec.family == FamilyGPU {
			var l gpuLabels
			for k, v := range dp.Attributes().All() {
				if dst := l.field(k); dst != nil {
					*dst = v.AsString()
				}
			}
			s.Placement = l.placement(res)
		} else {
			var l engineLabels
			for k, v := range dp.Attributes().All() {
				if dst := l.field(k); dst != nil {
					*dst = v.AsString()
				}
			}
			s.Model, s.Placement = l.placement(res)
		}
		n.out.Samples = append(n.out.Samples, s)
	}
	n.finish(spec, first)
}

// histogram normalizes the points of a step-size histogram.
func (n *metricNormalizer) histogram(points pmetric.HistogramDataPointSlice, name string, res *metricRes) {
	for p := 0; p < points.Len(); p++ {
		dp := points.At(p)
		sum, sq, ok := n.histSamples(name, p, &histPoint{
			flags: dp.Flags(), time: uint64(dp.Timestamp()), start: uint64(dp.StartTimestamp()),
			bounds: dp.ExplicitBounds().AsRaw(), counts: dp.BucketCounts().AsRaw(),
		})
		if !ok {
			continue
		}
		var l engineLabels
		for k, v := range dp.Attributes().All() {
			if dst := l.field(k); dst != nil {
				*dst = v.AsString()
			}
		}
		sum.Model, sum.Placement = l.placement(res)
		sq.Model, sq.Placement = sum.Model, sum.Placement
		n.out.Samples = append(n.out.Samples, sum, sq)
	}
}

// engineLabels are the labels of an engine point the model keeps.
type engineLabels struct {
	model, engine, dpRank string
}

// field is where the value of label k goes (nil: not kept). The last value
// of a label wins.
func (l *engineLabels) field(k string) *string {
	switch k {
	case "model_name":
		return &l.model
	case "engine":
		return &l.engine
	case "dp_rank":
		return &l.dpRank
	}
	return nil
}

// placement is the model and placement of an engine point. SGLang's
// dp_rank plays the role of vLLM's engine index.
func (l *engineLabels) placement(res *metricRes) (string, Placement) {
	p := res.engine
	if l.engine != "" {
		p.Engine = l.engine
	}
	if p.Engine == "" {
		p.Engine = l.dpRank
	}
	return l.model, p
}

// gpuLabels are dcgm-exporter's labels. The pod, namespace labels name the
// workload holding the GPU; the resource's k8s.* attributes describe the
// exporter's own pod and are not used.
type gpuLabels struct {
	hostname, hostnameLower, uuid, uuidLower string
	gpu, pod, namespace                      string
}

// field is where the value of label k goes (nil: not kept). The last value
// of a label wins.
func (l *gpuLabels) field(k string) *string {
	switch k {
	case "Hostname":
		return &l.hostname
	case "hostname":
		return &l.hostnameLower
	case "UUID":
		return &l.uuid
	case "uuid":
		return &l.uuidLower
	case "gpu":
		return &l.gpu
	case "pod":
		return &l.pod
	case "namespace":
		return &l.namespace
	}
	return nil
}

func (l *gpuLabels) placement(res *metricRes) Placement {
	return Placement{
		Host:      firstNonEmpty(l.hostname, l.hostnameLower, res.host),
		GPU:       firstNonEmpty(l.uuid, l.uuidLower),
		GPUIndex:  l.gpu,
		Pod:       l.pod,
		Namespace: l.namespace,
	}
}

// sumSamples sums samples of one placement, model and time into one; the
// start of a summed cumulative series is the earliest start of its parts.
// The result reuses s.
func sumSamples(s []Sample) []Sample {
	if len(s) < 2 {
		return s
	}
	type key struct {
		model     string
		placement Placement
		time      uint64
	}
	at := make(map[key]int, len(s))
	out := s[:0]
	for _, x := range s {
		k := key{x.Model, x.Placement, x.TimeNs}
		if i, ok := at[k]; ok {
			out[i].Value += x.Value
			if x.StartNs != 0 && (out[i].StartNs == 0 || x.StartNs < out[i].StartNs) {
				out[i].StartNs = x.StartNs
			}
			continue
		}
		at[k] = len(out)
		out = append(out, x)
	}
	return out
}
