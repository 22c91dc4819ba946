package normalize

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

func loadMetrics(t *testing.T, fixture string) Batch {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	md, err := DecodeMetrics(raw, EncodingJSON)
	if err != nil {
		t.Fatal(err)
	}
	return Metrics(md)
}

func findSample(t *testing.T, b Batch, m Metric, match func(Sample) bool) Sample {
	t.Helper()
	var found []Sample
	for _, s := range b.Samples {
		if s.Metric == m && match(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d samples of %s match, want 1: %+v", len(found), m, found)
	}
	return found[0]
}

func TestLookupMetric(t *testing.T) {
	tests := []struct {
		name   string
		metric Metric
		kind   SampleKind
		family Family
	}{
		{"vllm:num_requests_running", MetricRunning, Gauge, FamilyEngine},
		{"vllm:kv_cache_usage_perc", MetricKVUsage, Gauge, FamilyEngine},
		{"vllm:gpu_cache_usage_perc", MetricKVUsage, Gauge, FamilyEngine},
		{"vllm:num_preemptions_total", MetricPreemptions, Cumulative, FamilyEngine},
		{"vllm:num_preemptions", MetricPreemptions, Cumulative, FamilyEngine},
		{"vllm:prefix_cache_hits_total", MetricPrefixHits, Cumulative, FamilyEngine},
		{"vllm:gpu_prefix_cache_hits_total", MetricPrefixHits, Cumulative, FamilyEngine},
		{"vllm:gpu_prefix_cache_queries", MetricPrefixQueries, Cumulative, FamilyEngine},
		{"vllm:prompt_tokens_recomputed", MetricRecomputedTokens, Cumulative, FamilyEngine},
		{"sglang:num_queue_reqs", MetricWaiting, Gauge, FamilyEngine},
		{"sglang:token_usage", MetricKVUsage, Gauge, FamilyEngine},
		{"sglang:num_retracted_requests_total", MetricPreemptions, Cumulative, FamilyEngine},
		{"sglang:num_retracted_requests", MetricPreemptions, Cumulative, FamilyEngine},
		{"tgi_queue_size", MetricWaiting, Gauge, FamilyEngine},
		{"tgi_batch_current_size", MetricBatchSize, Gauge, FamilyEngine},
		{"DCGM_FI_DEV_GPU_UTIL", MetricGPUUtil, Gauge, FamilyGPU},
		{"DCGM_FI_DEV_XID_ERRORS", MetricXID, Gauge, FamilyGPU},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", MetricNVLinkBytes, Cumulative, FamilyGPU},
		{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", MetricClockReasons, Gauge, FamilyGPU},
		{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", MetricClockReasons, Gauge, FamilyGPU},
		{"DCGM_EXP_XID_ERRORS_COUNT", MetricXIDCount, Gauge, FamilyGPU},
		{"DCGM_FI_DEV_THERMAL_VIOLATION", MetricThermalViolation, Cumulative, FamilyGPU},
	}
	for _, tt := range tests {
		spec, ok := lookupMetric(tt.name)
		if !ok || spec.metric != tt.metric || spec.kind != tt.kind || spec.family != tt.family {
			t.Errorf("lookupMetric(%q) = %+v, %v; want %s %d %s", tt.name, spec, ok, tt.metric, tt.kind, tt.family)
		}
	}
	for _, name := range []string{"vllm:time_to_first_token_seconds", "DCGM_EXP_CLOCK_EVENTS_COUNT", "", "_total"} {
		if _, ok := lookupMetric(name); ok {
			t.Errorf("lookupMetric(%q) found a mapping", name)
		}
	}
}

func TestMetricsKeyValues(t *testing.T) {
	dcgm := loadMetrics(t, "dcgm_metrics.json")
	gpu0 := func(s Sample) bool { return s.Placement.GPUIndex == "0" }
	gpu1 := func(s Sample) bool { return s.Placement.GPUIndex == "1" }

	if s := findSample(t, dcgm, MetricGPUUtil, gpu0); s.Value != 0.87 {
		t.Errorf("GPU_UTIL 87%% = %v, want 0.87", s.Value)
	}
	if s := findSample(t, dcgm, MetricMemCopyUtil, gpu0); s.Value != 0.45 {
		t.Errorf("MEM_COPY_UTIL 45%% = %v, want 0.45", s.Value)
	}
	if s := findSample(t, dcgm, MetricDRAMActive, gpu0); s.Value != 0.781 {
		t.Errorf("DRAM_ACTIVE = %v, want the ratio unchanged", s.Value)
	}
	if s := findSample(t, dcgm, MetricXID, gpu0); s.Value != 79 || s.Kind != Gauge {
		t.Errorf("XID_ERRORS = %+v, want the last code 79 as a gauge", s)
	}
	if s := findSample(t, dcgm, MetricXIDCount, gpu0); s.Value != 3 {
		t.Errorf("XID_ERRORS_COUNT over xid 79 and 48 = %v, want 3", s.Value)
	}
	if s := findSample(t, dcgm, MetricXIDTotal, gpu0); s.Value != 7 || s.StartNs != 1767139200000000000 {
		t.Errorf("XID_ERRORS_TOTAL = %+v, want 7 from the earliest start", s)
	}
	if s := findSample(t, dcgm, MetricClockReasons, gpu0); uint32(s.Value)&(ThrottleSWThermal|ThrottleHWThermal) != ThrottleSWThermal|ThrottleHWThermal {
		t.Errorf("CLOCKS_EVENT_REASONS = %v, want thermal bits", s.Value)
	}
	if s := findSample(t, dcgm, MetricClockReasons, gpu1); uint32(s.Value) != ThrottleSWPowerCap {
		t.Errorf("old CLOCK_THROTTLE_REASONS = %v, want power cap", s.Value)
	}
	if s := findSample(t, dcgm, MetricPCIeReplay, gpu0); s.Kind != Cumulative || s.StartNs == 0 {
		t.Errorf("PCIE_REPLAY_COUNTER = %+v, want cumulative with a start", s)
	}
	wantGPU0 := Placement{Host: "gpu-node-3", Pod: "vllm-llama-0", Namespace: "inference",
		GPU: "GPU-5fd4d4a2-8c4b-1e7f-3a9e-0c2b4d6f8a10", GPUIndex: "0"}
	if diff := cmp.Diff(wantGPU0, findSample(t, dcgm, MetricSMClock, gpu0).Placement); diff != "" {
		t.Errorf("GPU 0 placement (-want +got):\n%s", diff)
	}
	// Lower-case labels of newer builds; no workload pod; never the exporter's pod.
	wantGPU1 := Placement{Host: "gpu-node-3", GPU: "GPU-7ac1e9b3-2d5f-4c6a-8b0e-1f3a5c7e9d21", GPUIndex: "1"}
	if diff := cmp.Diff(wantGPU1, findSample(t, dcgm, MetricSMClock, gpu1).Placement); diff != "" {
		t.Errorf("GPU 1 placement (-want +got):\n%s", diff)
	}
	// No Hostname label: the exporter's node (it runs on the GPU's node).
	if s := findSample(t, dcgm, MetricSMClock, func(s Sample) bool { return s.Placement.GPUIndex == "2" }); s.Placement.Host != "gpu-node-3" || s.Placement.Pod != "" {
		t.Errorf("GPU 2 placement %+v", s.Placement)
	}
	if dcgm.Ignored[IgnoredNoRecordedValue] != 1 || dcgm.Ignored[IgnoredUnknownMetric] != 1 || len(dcgm.Rejects) != 1 {
		t.Errorf("dcgm ignored %v rejects %v", dcgm.Ignored, dcgm.Rejects)
	}

	vllm := loadMetrics(t, "vllm_metrics.json")
	e0 := func(s Sample) bool { return s.Placement.Engine == "0" && s.Model == "meta-llama/Llama-3.1-8B-Instruct" }
	s := findSample(t, vllm, MetricKVUsage, e0)
	wantEngine := Placement{Host: "gpu-node-3", Pod: "vllm-llama-0", Namespace: "inference", ServiceInstance: "10.0.3.17:8000", Engine: "0"}
	if s.Value != 0.8731 || s.Family != FamilyEngine || !cmp.Equal(s.Placement, wantEngine) {
		t.Errorf("kv usage %+v", s)
	}
	old := func(s Sample) bool { return s.Model == "mistral-7b" }
	if s := findSample(t, vllm, MetricKVUsage, old); s.Value != 0.97 || s.Placement.Host != "gpu-node-4" {
		t.Errorf("gpu_cache_usage_perc %+v", s)
	}
	if s := findSample(t, vllm, MetricPrefixQueries, old); s.Value != 5000 || s.Kind != Cumulative {
		t.Errorf("gpu_prefix_cache_queries_total %+v", s)
	}
	if s := findSample(t, vllm, MetricPrefixQueries, e0); s.Value != 1.2e6 {
		t.Errorf("prefix_cache_queries without _total %+v", s)
	}
	if vllm.Ignored[IgnoredHistogram] != 1 || vllm.Ignored[IgnoredUnknownMetric] != 1 {
		t.Errorf("vllm ignored %v", vllm.Ignored)
	}
	// vllm:iteration_tokens_total, buckets ≤16, ≤512, ≤2048, +Inf: 40, 3, 2, 1.
	if s := findSample(t, vllm, MetricStepTokens, e0); s.Value != 40*16+3*512+2*2048+1*4096 || s.Kind != Cumulative || s.StartNs == 0 || !cmp.Equal(s.Placement, wantEngine) {
		t.Errorf("step tokens %+v", s)
	}
	if s := findSample(t, vllm, MetricStepTokensSq, e0); s.Value != 40*16*16+3*512*512+2*2048*2048+4096*4096 {
		t.Errorf("step tokens² %+v", s)
	}

	sg := loadMetrics(t, "sglang_metrics.json")
	if s := findSample(t, sg, MetricRunning, func(s Sample) bool { return s.Placement.Engine == "1" }); s.Value != 5 {
		t.Errorf("sglang dp_rank 1 running %+v", s)
	}
	if s := findSample(t, sg, MetricPreemptions, func(Sample) bool { return true }); s.Value != 17 || s.Kind != Cumulative {
		t.Errorf("sglang retractions %+v", s)
	}

	tgi := loadMetrics(t, "tgi_metrics.json")
	if s := findSample(t, tgi, MetricBatchSize, func(Sample) bool { return true }); s.Value != 32 || s.Placement.Host != "gpu-node-9" {
		t.Errorf("tgi batch size %+v", s)
	}
}

func TestMetricsWireTypes(t *testing.T) {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("server.address", "10.1.1.1")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()

	// A counter scraped without type metadata arrives as a gauge.
	g := ms.AppendEmpty()
	g.SetName("vllm:num_preemptions_total")
	dp := g.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(10)
	dp.SetStartTimestamp(5) // gauges have no series start
	dp.SetIntValue(4)

	// A gauge that arrives as a non-monotonic cumulative sum.
	s := ms.AppendEmpty()
	s.SetName("vllm:num_requests_waiting")
	sum := s.SetEmptySum()
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp = sum.DataPoints().AppendEmpty()
	dp.SetTimestamp(10)
	dp.SetStartTimestamp(5)
	dp.SetDoubleValue(2)

	// Delta sums are not what the prometheus receiver sends.
	d := ms.AppendEmpty()
	d.SetName("vllm:prompt_tokens_total")
	dsum := d.SetEmptySum()
	dsum.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	dsum.DataPoints().AppendEmpty().SetTimestamp(10)

	// Empty and NaN values.
	e := ms.AppendEmpty()
	e.SetName("vllm:num_requests_running")
	eg := e.SetEmptyGauge()
	eg.DataPoints().AppendEmpty().SetTimestamp(10)
	nanDP := eg.DataPoints().AppendEmpty()
	nanDP.SetTimestamp(10)
	nanDP.SetDoubleValue(nan())

	ms.AppendEmpty().SetName("no data at all")
	ms.AppendEmpty().SetEmptySummary().DataPoints().AppendEmpty()

	b := Metrics(md)
	want := []Sample{
		{Family: FamilyEngine, Metric: MetricPreemptions, Kind: Cumulative, Placement: Placement{Host: "10.1.1.1"}, TimeNs: 10, Value: 4},
		{Family: FamilyEngine, Metric: MetricWaiting, Kind: Gauge, Placement: Placement{Host: "10.1.1.1"}, TimeNs: 10, Value: 2},
	}
	if diff := cmp.Diff(want, b.Samples); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	wantIgnored := map[string]int{IgnoredDeltaSum: 1, IgnoredNoValue: 3, IgnoredSummary: 1}
	if diff := cmp.Diff(wantIgnored, b.Ignored, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ignored (-want +got):\n%s", diff)
	}
}
