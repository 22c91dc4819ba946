package otlpfixture

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Placement of the fixture's single engine.
const (
	Host      = "node-1"
	Pod       = "vllm-llama-0"
	Namespace = "serving"
	Model     = "llama-3-8b"
	Engine    = "0"
	GPU       = "GPU-11111111-2222-3333-4444-555555555555"
	Service   = "vllm-llama"
)

// T0 is the fixture's start.
var T0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// Requests is the number of vLLM requests; request k starts at
// T0 + 5 s + 8 s·k and lasts 3 s.
const Requests = 12

func ts(d time.Duration) pcommon.Timestamp { return pcommon.NewTimestampFromTime(T0.Add(d)) }

// TraceID of request k (vLLM) — deterministic.
func TraceID(k int) pcommon.TraceID {
	var id pcommon.TraceID
	binary.BigEndian.PutUint64(id[:8], 0x0af7651916cd43dd)
	binary.BigEndian.PutUint64(id[8:], uint64(k+1))
	return id
}

// UID is the enriched row uid of vLLM request k.
func UID(k int) string {
	t, s := TraceID(k), SpanID(k)
	return hex.EncodeToString(t[:]) + "-" + hex.EncodeToString(s[:])
}

// SpanID of request k.
func SpanID(k int) pcommon.SpanID {
	var id pcommon.SpanID
	binary.BigEndian.PutUint64(id[:], 0xb7ad6b7169203331+uint64(k))
	return id
}

// Start of vLLM request k.
func Start(k int) time.Duration { return 5*time.Second + time.Duration(k)*8*time.Second }

func resource(rs pcommon.Resource) {
	a := rs.Attributes()
	a.PutStr("service.name", Service)
	a.PutStr("host.name", Host)
	a.PutStr("k8s.pod.name", Pod)
	a.PutStr("k8s.namespace.name", Namespace)
	a.PutStr("service.instance.id", "10.0.0.1:8000")
}

// Traces is every request span: Requests vLLM spans, plus the SGLang
// request with its decode_loop steps (see SGLangUID).
func Traces() ptrace.Traces { return TracesFor(0, Requests, true) }

// TracesFor is the vLLM requests k in [from, to), and the SGLang request
// when withSGLang is set.
func TracesFor(from, to int, withSGLang bool) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	resource(rs.Resource())
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	for k := from; k < to; k++ {
		sp := ss.Spans().AppendEmpty()
		sp.SetName("llm_request")
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetTraceID(TraceID(k))
		sp.SetSpanID(SpanID(k))
		sp.SetStartTimestamp(ts(Start(k)))
		sp.SetEndTimestamp(ts(Start(k) + 3*time.Second))
		a := sp.Attributes()
		a.PutDouble("gen_ai.latency.time_to_first_token", 0.25)
		a.PutDouble("gen_ai.latency.e2e", 3.0)
		a.PutDouble("gen_ai.latency.time_in_queue", 0.05)
		a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.2)
		a.PutDouble("gen_ai.latency.time_in_model_decode", 2.75)
		a.PutDouble("gen_ai.latency.time_in_model_inference", 2.95)
		a.PutInt("gen_ai.usage.prompt_tokens", int64(1000+100*k))
		a.PutInt("gen_ai.usage.completion_tokens", 100)
		a.PutStr("gen_ai.request.id", fmt.Sprintf("cmpl-%04d", k))
		a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
		a.PutStr("gen_ai.request.model", Model)
		a.PutInt("gen_ai.request.max_tokens", 256)
		sp.Status().SetCode(ptrace.StatusCodeOk)
	}
	if withSGLang {
		sglangTrace(td)
	}
	return td
}

// SGLang request: a unified server (span name starts with a space), 64-bit
// ids, 30 decode_loop steps every 25 ms after a 300 ms TTFT, with one
// 600 ms stall after the 20th token and a retract event inside it.
const (
	SGLangStart  = 50 * time.Second
	SGLangTokens = 31
)

// SGLangTraceID has only 64 random bits, as SGLang's.
func SGLangTraceID() pcommon.TraceID {
	var id pcommon.TraceID
	binary.BigEndian.PutUint64(id[8:], 0x5f3c2a1b0d9e8f70)
	return id
}

func sglangSpanID(n int) pcommon.SpanID {
	var id pcommon.SpanID
	binary.BigEndian.PutUint64(id[:], 0x1000+uint64(n))
	return id
}

// SGLangUID is the row uid of the SGLang request.
func SGLangUID() string {
	t, s := SGLangTraceID(), sglangSpanID(0)
	return hex.EncodeToString(t[:]) + "-" + hex.EncodeToString(s[:])
}

// SGLangTokenTimes are the token emission offsets from T0.
func SGLangTokenTimes() []time.Duration {
	out := []time.Duration{SGLangStart + 300*time.Millisecond}
	t := out[0]
	for i := 1; i < SGLangTokens; i++ {
		if i == 21 {
			t += 600 * time.Millisecond
		} else {
			t += 25 * time.Millisecond
		}
		out = append(out, t)
	}
	return out
}

func sglangTrace(td ptrace.Traces) {
	rs := td.ResourceSpans().AppendEmpty()
	a := rs.Resource().Attributes()
	a.PutStr("service.name", "sglang-llama")
	a.PutStr("host.name", Host)
	a.PutStr("k8s.pod.name", Pod)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("sglang")
	times := SGLangTokenTimes()
	end := times[len(times)-1] + 5*time.Millisecond
	root := ss.Spans().AppendEmpty()
	root.SetName(" Req 5f3c2a1b")
	root.SetTraceID(SGLangTraceID())
	root.SetSpanID(sglangSpanID(0))
	root.SetStartTimestamp(ts(SGLangStart))
	root.SetEndTimestamp(ts(end))
	ra := root.Attributes()
	ra.PutStr("rid", "5f3c2a1b0d9e8f7061524334")
	ra.PutStr("module", "sglang::request")
	ra.PutDouble("gen_ai.latency.time_to_first_token", 0.3)
	ra.PutDouble("gen_ai.latency.e2e", (end - SGLangStart).Seconds())
	ra.PutDouble("gen_ai.latency.time_in_model_prefill", 0.3)
	ra.PutInt("gen_ai.usage.prompt_tokens", 2048)
	ra.PutInt("gen_ai.usage.completion_tokens", SGLangTokens)
	ra.PutInt("gen_ai.usage.cached_tokens", 1024)
	ra.PutStr("gen_ai.response.model", Model)
	ev := root.Events().AppendEmpty()
	ev.SetName("retract")
	ev.SetTimestamp(ts(times[20] + 300*time.Millisecond))
	for i := 1; i < len(times); i++ {
		st := ss.Spans().AppendEmpty()
		st.SetName("decode_loop")
		st.SetTraceID(SGLangTraceID())
		st.SetSpanID(sglangSpanID(i))
		st.SetParentSpanID(sglangSpanID(0))
		st.SetStartTimestamp(ts(times[i] - 20*time.Millisecond))
		st.SetEndTimestamp(ts(times[i]))
		st.Attributes().PutInt("decode_ct", int64(i))
	}
}

// Engine scrape i (every 10 s from T0, i = 0..EngineScrapes-1).
const EngineScrapes = 13

// DCGM scrape i (every 30 s from T0, i = 0..GPUScrapes-1). Scrape 2
// (T0+60 s) sees a hardware-thermal throttle.
const GPUScrapes = 5

// EngineValues are the gauges and counters of engine scrape i.
func EngineValues(i int) (running, waiting, kv, preemptions, prefixQueries, prefixHits, promptTokens, genTokens float64) {
	running = float64(4 + i%3)
	waiting = float64(i)
	kv = 0.30 + 0.05*float64(i)
	if i >= 6 {
		preemptions = float64(3 * (i - 5))
	}
	return running, waiting, kv, preemptions, float64(1000 * i), float64(400 * i), float64(5000 * i), float64(2000 * i)
}

// GPUValues are the DCGM fields of GPU scrape i.
func GPUValues(i int) (smClock, reasons, temp, power, dram, pcieTx, pcieRx float64) {
	if i == 2 {
		return 1410, 0x40, 87, 700, 0.5, 1e9, 2e9
	}
	return 1980, 0, 65, 400, 0.5, 1e9, 2e9
}

// Metrics is every scrape, in one pmetric.Metrics per scrape as the
// prometheus receiver emits them (engine and DCGM are separate jobs).
func Metrics() []pmetric.Metrics {
	var out []pmetric.Metrics
	for i := 0; i < EngineScrapes; i++ {
		out = append(out, engineScrape(i))
		if i%3 == 0 && i/3 < GPUScrapes {
			out = append(out, gpuScrape(i/3))
		}
	}
	return out
}

func engineScrape(i int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	a := rm.Resource().Attributes()
	a.PutStr("service.name", "vllm")
	a.PutStr("service.instance.id", "10.0.0.1:8000")
	a.PutStr("host.name", Host)
	a.PutStr("k8s.pod.name", Pod)
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver")
	t := ts(time.Duration(i) * 10 * time.Second)
	start := ts(-time.Hour)
	running, waiting, kv, pre, pq, ph, pt, gt := EngineValues(i)
	gauge := func(name string, v float64) {
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(t)
		dp.SetDoubleValue(v)
		dp.Attributes().PutStr("model_name", Model)
		dp.Attributes().PutStr("engine", Engine)
	}
	counter := func(name string, v float64) {
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		s := m.SetEmptySum()
		s.SetIsMonotonic(true)
		s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := s.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(start)
		dp.SetTimestamp(t)
		dp.SetDoubleValue(v)
		dp.Attributes().PutStr("model_name", Model)
		dp.Attributes().PutStr("engine", Engine)
	}
	gauge("vllm:num_requests_running", running)
	gauge("vllm:num_requests_waiting", waiting)
	gauge("vllm:kv_cache_usage_perc", kv)
	counter("vllm:num_preemptions_total", pre)
	counter("vllm:prefix_cache_queries_total", pq)
	counter("vllm:prefix_cache_hits_total", ph)
	counter("vllm:prompt_tokens_total", pt)
	counter("vllm:generation_tokens_total", gt)
	// A metric nobody maps: counted, never an error.
	gauge("vllm:some_future_metric", 1)
	return md
}

func gpuScrape(i int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	a := rm.Resource().Attributes()
	a.PutStr("service.name", "dcgm-exporter")
	a.PutStr("service.instance.id", "10.0.0.1:9400")
	a.PutStr("k8s.pod.name", "dcgm-exporter-x7k2p") // the exporter's pod, not the workload
	sm := rm.ScopeMetrics().AppendEmpty()
	t := ts(time.Duration(i) * 30 * time.Second)
	clock, reasons, temp, power, dram, tx, rx := GPUValues(i)
	gauge := func(name string, v float64) {
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(t)
		dp.SetDoubleValue(v)
		l := dp.Attributes()
		l.PutStr("gpu", "0")
		l.PutStr("UUID", GPU)
		l.PutStr("pci_bus_id", "00000000:07:00.0")
		l.PutStr("device", "nvidia0")
		l.PutStr("modelName", "NVIDIA H100 80GB HBM3")
		l.PutStr("Hostname", Host)
		l.PutStr("pod", Pod)
		l.PutStr("namespace", Namespace)
		l.PutStr("container", "vllm")
	}
	gauge("DCGM_FI_DEV_SM_CLOCK", clock)
	gauge("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", reasons)
	gauge("DCGM_FI_DEV_GPU_TEMP", temp)
	gauge("DCGM_FI_DEV_POWER_USAGE", power)
	gauge("DCGM_FI_PROF_DRAM_ACTIVE", dram)
	gauge("DCGM_FI_PROF_PCIE_TX_BYTES", tx)
	gauge("DCGM_FI_PROF_PCIE_RX_BYTES", rx)
	gauge("DCGM_FI_DEV_XID_ERRORS", 0)
	return md
}

// Expectation is what the enricher must write for one vLLM request.
type Expectation struct {
	UID                                string
	RunningAtArrival, WaitingAtArrival float64
	RunningAgeMs                       float64
	KVUsageMax                         float64
	PreemptionsDuring                  float64
	PrefixHitRatio                     float64
	SMClockMin                         float64
	ThrottleReasons                    uint32
	GPUTempMax                         float64
	SMClockAgeMs                       float64
}

// Expected derives, by the documented join rules, the features of vLLM
// request k (written out by hand in the test for two of them as a check).
func Expected(k int) Expectation {
	start := Start(k)
	end := start + 3*time.Second
	i := int(start / (10 * time.Second)) // as-of engine scrape
	running, waiting, _, _, _, _, _, _ := EngineValues(i)
	// KV max over the as-of scrape and scrapes inside (start, end].
	kvMax := 0.0
	for s := i; s < EngineScrapes && time.Duration(s)*10*time.Second <= end; s++ {
		_, _, kv, _, _, _, _, _ := EngineValues(s)
		kvMax = max(kvMax, kv)
	}
	// Counter intervals (10(s-1), 10s] overlapping [start, end]: s from the
	// first scrape after start up to the first at or after end, each delta
	// counted in the share of the interval the request covers.
	var pre, pq, ph float64
	for s := i + 1; s < EngineScrapes; s++ {
		_, _, _, p1, q1, h1, _, _ := EngineValues(s)
		_, _, _, p0, q0, h0, _, _ := EngineValues(s - 1)
		lo, hi := time.Duration(s-1)*10*time.Second, time.Duration(s)*10*time.Second
		w := float64(min(hi, end)-max(lo, start)) / float64(hi-lo)
		pre += w * (p1 - p0)
		pq += w * (q1 - q0)
		ph += w * (h1 - h0)
		if hi >= end {
			break
		}
	}
	g := int(start / (30 * time.Second))
	clock, reasons, temp, _, _, _, _ := GPUValues(g)
	minClock, or, maxTemp := clock, uint32(reasons), temp
	for s := g + 1; s < GPUScrapes && time.Duration(s)*30*time.Second <= end; s++ {
		c, r, tp, _, _, _, _ := GPUValues(s)
		minClock, or, maxTemp = min(minClock, c), or|uint32(r), max(maxTemp, tp)
	}
	return Expectation{
		UID: UID(k), RunningAtArrival: running, WaitingAtArrival: waiting,
		RunningAgeMs: float64((start - time.Duration(i)*10*time.Second) / time.Millisecond),
		KVUsageMax:   kvMax, PreemptionsDuring: pre, PrefixHitRatio: ph / pq,
		SMClockMin: minClock, ThrottleReasons: or, GPUTempMax: maxTemp,
		SMClockAgeMs: float64((start - time.Duration(g)*30*time.Second) / time.Millisecond),
	}
}
