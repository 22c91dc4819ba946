package normalize

import (
	"encoding/binary"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

const benchT0 = uint64(1767225600_000_000_000)

// vllmBatch is one kafka record of n vLLM llm_request spans, as vLLM's
// OTLP exporter and the Collector would send them.
func vllmBatch(b *testing.B, n int) []byte {
	b.Helper()
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	ra := rs.Resource().Attributes()
	ra.PutStr("service.name", "vllm-llama3-8b")
	ra.PutStr("host.name", "gpu-node-3")
	ra.PutStr("k8s.pod.name", "vllm-llama-0")
	ra.PutStr("k8s.namespace.name", "inference")
	ra.PutStr("telemetry.sdk.language", "python")
	ra.PutInt("vllm.process_id", 4711)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	for i := 0; i < n; i++ {
		sp := ss.Spans().AppendEmpty()
		var tid pcommon.TraceID
		var sid, pid pcommon.SpanID
		binary.BigEndian.PutUint64(tid[:8], uint64(i)*0x9e3779b97f4a7c15)
		binary.BigEndian.PutUint64(tid[8:], uint64(i)+1)
		binary.BigEndian.PutUint64(sid[:], uint64(i)*0x2545f4914f6cdd1d+1)
		binary.BigEndian.PutUint64(pid[:], uint64(i)*0x5851f42d4c957f2d+1)
		sp.SetTraceID(tid)
		sp.SetSpanID(sid)
		sp.SetParentSpanID(pid)
		sp.SetName("llm_request")
		sp.SetKind(ptrace.SpanKindServer)
		start := benchT0 + uint64(i)*3_000_000
		sp.SetStartTimestamp(pcommon.Timestamp(start))
		sp.SetEndTimestamp(pcommon.Timestamp(start + 1_734_500_000))
		a := sp.Attributes()
		a.PutStr("gen_ai.response.model", "meta-llama/Llama-3.1-8B-Instruct")
		a.PutStr("gen_ai.request.id", fmt.Sprintf("chatcmpl-%016x", i))
		a.PutInt("gen_ai.request.max_tokens", 256)
		a.PutDouble("gen_ai.request.temperature", 0.7)
		a.PutDouble("gen_ai.request.top_p", 0.9)
		a.PutInt("gen_ai.request.n", 1)
		a.PutInt("gen_ai.usage.prompt_tokens", int64(100+i%900))
		a.PutInt("gen_ai.usage.completion_tokens", int64(10+i%200))
		a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
		a.PutDouble("gen_ai.latency.time_in_queue", 0.0125)
		a.PutDouble("gen_ai.latency.time_to_first_token", 0.2105)
		a.PutDouble("gen_ai.latency.e2e", 1.7345)
		a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.198)
		a.PutDouble("gen_ai.latency.time_in_model_decode", 1.524)
		a.PutDouble("gen_ai.latency.time_in_model_inference", 1.722)
	}
	var m ptrace.ProtoMarshaler
	buf, err := m.MarshalTraces(td)
	if err != nil {
		b.Fatal(err)
	}
	return buf
}

// dcgmBatch is one kafka record of a dcgm-exporter scrape: 8 GPUs × 25
// fields × 5 scrapes = 1000 points.
func dcgmBatch(b *testing.B) []byte {
	b.Helper()
	fields := []string{
		"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP",
		"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED",
		"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
		"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
		"DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
		"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_CLOCK_EVENTS_COUNT",
		// counters
		"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_POWER_VIOLATION",
		"DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_EXP_XID_ERRORS_TOTAL",
	}
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	ra := rm.Resource().Attributes()
	ra.PutStr("service.name", "dcgm-exporter")
	ra.PutStr("service.instance.id", "10.0.7.21:9400")
	ra.PutStr("server.address", "10.0.7.21")
	ra.PutStr("k8s.pod.name", "nvidia-dcgm-exporter-x7k2p")
	ra.PutStr("k8s.node.name", "gpu-node-3")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	for fi, f := range fields {
		m := ms.AppendEmpty()
		m.SetName(f)
		var dps pmetric.NumberDataPointSlice
		counter := fi >= 20
		if counter {
			sum := m.SetEmptySum()
			sum.SetIsMonotonic(true)
			sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			dps = sum.DataPoints()
		} else {
			dps = m.SetEmptyGauge().DataPoints()
		}
		for scrape := 0; scrape < 5; scrape++ {
			for g := 0; g < 8; g++ {
				dp := dps.AppendEmpty()
				a := dp.Attributes()
				a.PutStr("gpu", fmt.Sprint(g))
				a.PutStr("UUID", fmt.Sprintf("GPU-5fd4d4a2-8c4b-1e7f-3a9e-0c2b4d6f8a1%d", g))
				a.PutStr("pci_bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+g))
				a.PutStr("device", fmt.Sprintf("nvidia%d", g))
				a.PutStr("modelName", "NVIDIA H100 80GB HBM3")
				a.PutStr("Hostname", "gpu-node-3")
				a.PutStr("DCGM_FI_DRIVER_VERSION", "550.54.15")
				a.PutStr("pod", fmt.Sprintf("vllm-llama-%d", g/2))
				a.PutStr("namespace", "inference")
				a.PutStr("container", "vllm")
				if f == "DCGM_EXP_XID_ERRORS_COUNT" || f == "DCGM_EXP_XID_ERRORS_TOTAL" {
					a.PutStr("xid", "0")
				}
				dp.SetTimestamp(pcommon.Timestamp(benchT0 + uint64(scrape)*30e9))
				if counter {
					dp.SetStartTimestamp(pcommon.Timestamp(benchT0 - 86400e9))
					dp.SetIntValue(int64(1000*scrape + g))
				} else {
					dp.SetDoubleValue(float64(scrape*g) + 0.5)
				}
			}
		}
	}
	var m pmetric.ProtoMarshaler
	buf, err := m.MarshalMetrics(md)
	if err != nil {
		b.Fatal(err)
	}
	return buf
}

func BenchmarkDecodeNormalizeVLLM500(b *testing.B) {
	buf := vllmBatch(b, 500)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		td, err := DecodeTraces(buf, EncodingProto)
		if err != nil {
			b.Fatal(err)
		}
		if out := Traces(td); len(out.Requests) != 500 {
			b.Fatalf("%d requests", len(out.Requests))
		}
	}
}

// BenchmarkTracesDecoderVLLM500 is BenchmarkDecodeNormalizeVLLM500 on the
// wire path, as the enricher's span fetcher decodes.
func BenchmarkTracesDecoderVLLM500(b *testing.B) {
	buf := vllmBatch(b, 500)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var d TracesDecoder
	for b.Loop() {
		out, err := d.Record(buf, EncodingProto)
		if err != nil {
			b.Fatal(err)
		}
		if len(out.Requests) != 500 {
			b.Fatalf("%d requests", len(out.Requests))
		}
	}
}

func BenchmarkNormalizeVLLM500(b *testing.B) {
	td, err := DecodeTraces(vllmBatch(b, 500), EncodingProto)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		Traces(td)
	}
}

func BenchmarkDecodeNormalizeDCGM1000(b *testing.B) {
	buf := dcgmBatch(b)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		md, err := DecodeMetrics(buf, EncodingProto)
		if err != nil {
			b.Fatal(err)
		}
		if out := Metrics(md); len(out.Samples) != 960 {
			b.Fatalf("%d samples", len(out.Samples))
		}
	}
}

// BenchmarkMetricsDecoderDCGM1000 is BenchmarkDecodeNormalizeDCGM1000
// through the wire path (the enricher's), with and without reusing the
// Samples array.
func BenchmarkMetricsDecoderDCGM1000(b *testing.B) {
	buf := dcgmBatch(b)
	for _, reuse := range []bool{false, true} {
		b.Run(fmt.Sprintf("reuse=%v", reuse), func(b *testing.B) {
			d := MetricsDecoder{ReuseSamples: reuse}
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				out, err := d.Record(buf, EncodingProto)
				if err != nil || len(out.Samples) != 960 {
					b.Fatalf("%d samples, %v", len(out.Samples), err)
				}
			}
		})
	}
}

func BenchmarkNormalizeDCGM1000(b *testing.B) {
	md, err := DecodeMetrics(dcgmBatch(b), EncodingProto)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		Metrics(md)
	}
}

func BenchmarkCountersObserve(b *testing.B) {
	c := NewCounters(0)
	s := Sample{Family: FamilyGPU, Metric: MetricPCIeReplay, Kind: Cumulative,
		Placement: Placement{Host: "gpu-node-3", GPU: "GPU-5fd4d4a2-8c4b-1e7f-3a9e-0c2b4d6f8a10", GPUIndex: "0"}}
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		i++
		s.TimeNs, s.Value = i, float64(i)
		c.Observe(s)
	}
}
