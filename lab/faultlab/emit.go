package faultlab

import (
	"context"
	"encoding/hex"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Telemetry names, exactly as the real emitters spell them
// (shared/reference/telemetry.md).
const (
	scopeVLLM       = "vllm.llm_engine"
	scopeSGLang     = "sglang"
	scopePromRecv   = "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver"
	promRecvVersion = "0.140.0"

	spanVLLM = "llm_request"

	jobVLLM = "vllm"
	jobDCGM = "dcgm-exporter"
)

// emitter turns simulation events into pdata batches: spans when requests
// (or SGLang steps) end, metrics when a scrape happens. Batches flush on a
// simulated-time interval or when MaxBatchSpans is reached, so memory stays
// bounded whatever the run length.
type emitter struct {
	s    *sim
	sink Sink
	ctx  context.Context
	err  error

	traces  ptrace.Traces
	spansOf []ptrace.SpanSlice // per engine, valid when gen matches
	genOf   []int
	gen     int
	nspans  int

	metrics  pmetric.Metrics
	npoints  int
	hexBuf   [32]byte
	finishes [3]string
}

func newEmitter(s *sim, sink Sink) *emitter {
	o := &emitter{
		s: s, sink: sink, ctx: context.Background(),
		traces:  ptrace.NewTraces(),
		metrics: pmetric.NewMetrics(),
		spansOf: make([]ptrace.SpanSlice, len(s.f.engines)),
		genOf:   make([]int, len(s.f.engines)),
		gen:     1,
	}
	for i := range o.finishes {
		o.finishes[i] = `["` + finishReason(i).String() + `"]`
	}
	return o
}

func (o *emitter) ts(simNs int64) pcommon.Timestamp {
	return pcommon.Timestamp(uint64(o.s.startNs + simNs))
}

// flush hands the current batches to the sink.
func (o *emitter) flush() {
	if o.err != nil {
		return
	}
	if o.npoints > 0 {
		md := o.metrics
		o.metrics = pmetric.NewMetrics()
		o.npoints = 0
		if err := o.sink.Metrics(o.ctx, md); err != nil {
			o.err = err
			return
		}
	}
	o.flushTraces()
}

func (o *emitter) flushTraces() {
	if o.err != nil || o.nspans == 0 {
		return
	}
	td := o.traces
	o.traces = ptrace.NewTraces()
	o.nspans = 0
	o.gen++
	if err := o.sink.Traces(o.ctx, td); err != nil {
		o.err = err
	}
}

// spans returns the span slice of engine e in the current batch, creating
// its resource (the pod) and scope on first use.
func (o *emitter) spans(e *engine) ptrace.SpanSlice {
	if o.genOf[e.idx] == o.gen {
		return o.spansOf[e.idx]
	}
	rs := o.traces.ResourceSpans().AppendEmpty()
	ra := rs.Resource().Attributes()
	ra.EnsureCapacity(5)
	ra.PutStr("service.name", e.m.service)
	ra.PutStr("host.name", e.host.name)
	ra.PutStr("k8s.pod.name", e.pod)
	ra.PutStr("k8s.namespace.name", o.s.f.namespace)
	ra.PutStr("service.instance.id", e.host.name+":"+strconv.Itoa(e.port))
	ss := rs.ScopeSpans().AppendEmpty()
	if e.sglang {
		ss.Scope().SetName(scopeSGLang)
	} else {
		ss.Scope().SetName(scopeVLLM)
	}
	o.genOf[e.idx] = o.gen
	o.spansOf[e.idx] = ss.Spans()
	return ss.Spans()
}

func (o *emitter) added() {
	o.nspans++
	o.s.stats.spans++
	if o.nspans >= o.s.cfg.MaxBatchSpans {
		// Flush metrics too, so the two streams stay in event-time order.
		o.flush()
	}
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }

// requestSpan emits the request's root span: vLLM llm_request, or SGLang's
// " Req <rid8>" with retract events.
func (o *emitter) requestSpan(r *request, end int64, why finishReason, failed bool) {
	e := r.e
	sp := o.spans(e).AppendEmpty()
	tid := r.traceID
	if e.sglang {
		// SGLang ids carry only 64 random bits.
		clear(tid[:8])
	}
	sp.SetTraceID(tid)
	sp.SetSpanID(r.spanID)
	sp.SetKind(ptrace.SpanKindServer)
	sp.SetStartTimestamp(o.ts(r.arrival))
	sp.SetEndTimestamp(o.ts(end))
	if failed {
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage("engine dead: request aborted")
	}
	a := sp.Attributes()
	a.EnsureCapacity(18)
	hex.Encode(o.hexBuf[:], r.rid[:])
	rid := string(o.hexBuf[:])
	if e.sglang {
		sp.SetName(" Req " + rid[:8])
		a.PutStr("rid", rid)
		a.PutStr("module", "sglang::request")
		a.PutStr("gen_ai.request.id", rid)
		a.PutStr("gen_ai.response.model", e.m.spec.Name)
		a.PutInt("gen_ai.usage.cached_tokens", int64(r.cached))
	} else {
		sp.SetName(spanVLLM)
		a.PutStr("gen_ai.request.id", "chatcmpl-"+rid)
		a.PutStr("gen_ai.response.model", e.m.spec.Name)
	}
	a.PutInt("gen_ai.usage.prompt_tokens", int64(r.prompt))
	a.PutInt("gen_ai.usage.completion_tokens", int64(r.generated))
	a.PutDouble("gen_ai.latency.e2e", secs(end-r.arrival))
	if r.firstTok >= 0 {
		a.PutDouble("gen_ai.latency.time_to_first_token", secs(r.firstTok-r.arrival))
		a.PutDouble("gen_ai.latency.time_in_model_decode", secs(r.lastTok-r.firstTok))
	}
	if r.scheduled >= 0 {
		if e.sglang {
			// SGLang's prefill time includes the queue; no time_in_queue.
			if r.firstTok >= 0 {
				a.PutDouble("gen_ai.latency.time_in_model_prefill", secs(r.firstTok-r.queued))
			}
		} else {
			a.PutDouble("gen_ai.latency.time_in_queue", secs(r.scheduled-r.queued))
			if r.firstTok >= 0 {
				a.PutDouble("gen_ai.latency.time_in_model_prefill", secs(r.firstTok-r.scheduled))
				a.PutDouble("gen_ai.latency.time_in_model_inference", secs(r.lastTok-r.scheduled))
			}
		}
	} else if !e.sglang {
		a.PutDouble("gen_ai.latency.time_in_queue", secs(end-r.queued))
	}
	reason := o.finishes[why]
	a.PutStr("gen_ai.response.finish_reasons", reason)
	if r.maxTokens > 0 {
		a.PutInt("gen_ai.request.max_tokens", int64(r.maxTokens))
	}
	if r.temperature > 0 {
		a.PutDouble("gen_ai.request.temperature", r.temperature)
	}
	if r.topP > 0 {
		a.PutDouble("gen_ai.request.top_p", r.topP)
	}
	for _, t := range r.retracts {
		ev := sp.Events().AppendEmpty()
		ev.SetName("retract")
		ev.SetTimestamp(o.ts(t))
	}
	o.added()
}

// stepSpan emits one SGLang stage span (decode_loop, prefill_forward,
// chunked_prefill) as a child of the request's root span.
func (o *emitter) stepSpan(r *request, name string, start, end int64, decodeCt int64) {
	if r.arrival < 0 {
		return // a warm-up request emits nothing
	}
	sp := o.spans(r.e).AppendEmpty()
	tid := r.traceID
	clear(tid[:8])
	sp.SetTraceID(tid)
	var sid [8]byte
	v := o.s.ids.Uint64()
	for i := range sid {
		sid[i] = byte(v >> (8 * i))
	}
	sp.SetSpanID(sid)
	sp.SetParentSpanID(r.spanID)
	sp.SetName(name)
	sp.SetKind(ptrace.SpanKindInternal)
	sp.SetStartTimestamp(o.ts(start))
	sp.SetEndTimestamp(o.ts(end))
	if name == "decode_loop" {
		sp.Attributes().PutInt("decode_ct", decodeCt)
	}
	o.s.stats.stepSpans++
	o.added()
}

// scrapeResource starts one scrape's ResourceMetrics as the prometheus
// receiver shapes it: service.name = job, service.instance.id = instance.
func (o *emitter) scrapeResource(job, instance, hostName string) pmetric.MetricSlice {
	rm := o.metrics.ResourceMetrics().AppendEmpty()
	ra := rm.Resource().Attributes()
	ra.PutStr("service.name", job)
	ra.PutStr("service.instance.id", instance)
	ra.PutStr("host.name", hostName)
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName(scopePromRecv)
	sm.Scope().SetVersion(promRecvVersion)
	return sm.Metrics()
}

func (o *emitter) gauge(ms pmetric.MetricSlice, name string) pmetric.NumberDataPointSlice {
	m := ms.AppendEmpty()
	m.SetName(name)
	return m.SetEmptyGauge().DataPoints()
}

func (o *emitter) counter(ms pmetric.MetricSlice, name string) pmetric.NumberDataPointSlice {
	m := ms.AppendEmpty()
	m.SetName(name)
	s := m.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	return s.DataPoints()
}

// engineMetrics is one scrape of an engine's vLLM /metrics.
func (o *emitter) engineMetrics(e *engine) {
	ms := o.scrapeResource(jobVLLM, e.host.name+":"+strconv.Itoa(e.port), e.host.name)
	ra := o.metrics.ResourceMetrics().At(o.metrics.ResourceMetrics().Len() - 1).Resource().Attributes()
	ra.PutStr("k8s.pod.name", e.pod)
	ra.PutStr("k8s.namespace.name", o.s.f.namespace)
	now := o.ts(o.s.now)
	start := o.ts(e.counterStart)
	point := func(dps pmetric.NumberDataPointSlice, v float64, counter bool) pmetric.NumberDataPoint {
		dp := dps.AppendEmpty()
		dp.SetTimestamp(now)
		if counter {
			dp.SetStartTimestamp(start)
		}
		dp.SetDoubleValue(v)
		dp.Attributes().PutStr("engine", "0")
		dp.Attributes().PutStr("model_name", e.m.spec.Name)
		o.npoints++
		o.s.stats.points++
		return dp
	}
	point(o.gauge(ms, "vllm:num_requests_running"), float64(len(e.running)), false)
	point(o.gauge(ms, "vllm:num_requests_waiting"), float64(e.waiting.len()), false)
	point(o.gauge(ms, "vllm:kv_cache_usage_perc"), e.kv.usage(), false)
	c := &e.cnt
	point(o.counter(ms, "vllm:num_preemptions_total"), c.preemptions, true)
	point(o.counter(ms, "vllm:prefix_cache_queries_total"), c.prefixQueries, true)
	point(o.counter(ms, "vllm:prefix_cache_hits_total"), c.prefixHits, true)
	point(o.counter(ms, "vllm:prompt_tokens_total"), c.promptTokens, true)
	point(o.counter(ms, "vllm:generation_tokens_total"), c.genTokens, true)
	point(o.counter(ms, "vllm:prompt_tokens_recomputed_total"), c.recomputed, true)
	succ := o.counter(ms, "vllm:request_success_total")
	for i, v := range c.success {
		point(succ, v, true).Attributes().PutStr("finished_reason", finishReason(i).String())
	}
	m := ms.AppendEmpty()
	m.SetName("vllm:iteration_tokens_total")
	h := m.SetEmptyHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	hp := h.DataPoints().AppendEmpty()
	hp.SetTimestamp(now)
	hp.SetStartTimestamp(start)
	var n uint64
	counts := hp.BucketCounts()
	counts.EnsureCapacity(len(c.steps))
	for _, v := range c.steps {
		counts.Append(uint64(v))
		n += uint64(v)
	}
	hp.SetCount(n)
	hp.SetSum(c.stepTokens)
	hp.ExplicitBounds().FromRaw(stepTokenBounds[:])
	hp.Attributes().PutStr("engine", "0")
	hp.Attributes().PutStr("model_name", e.m.spec.Name)
	o.npoints++
	o.s.stats.points++
}

// dcgmMetrics is one scrape of a host's dcgm-exporter: one point per GPU
// per field, labelled with the GPU and the pod holding it.
func (o *emitter) dcgmMetrics(h *host) {
	ms := o.scrapeResource(jobDCGM, h.name+":9400", h.name)
	now := o.ts(o.s.now)
	field := func(name string, v func(g *gpu) float64) {
		dps := o.gauge(ms, name)
		dps.EnsureCapacity(len(h.gpus))
		for _, g := range h.gpus {
			dp := dps.AppendEmpty()
			dp.SetTimestamp(now)
			dp.SetDoubleValue(v(g))
			a := dp.Attributes()
			a.EnsureCapacity(9)
			a.PutStr("gpu", strconv.Itoa(g.local))
			a.PutStr("UUID", g.uuid)
			a.PutStr("pci_bus_id", g.pciBusID)
			a.PutStr("device", g.device)
			a.PutStr("modelName", g.kind.ModelName)
			a.PutStr("Hostname", h.name)
			if e := g.engine; e != nil {
				a.PutStr("pod", e.pod)
				a.PutStr("namespace", o.s.f.namespace)
				if e.sglang {
					a.PutStr("container", "sglang")
				} else {
					a.PutStr("container", "vllm")
				}
			}
			o.npoints++
			o.s.stats.points++
		}
	}
	round1 := func(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
	field("DCGM_FI_DEV_SM_CLOCK", func(g *gpu) float64 { return g.smClockShown() })
	field("DCGM_FI_DEV_MEM_CLOCK", func(g *gpu) float64 { return g.kind.MemClockMHz })
	field("DCGM_FI_DEV_GPU_TEMP", func(g *gpu) float64 { return float64(int64(g.tempC + 0.5)) })
	field("DCGM_FI_DEV_POWER_USAGE", func(g *gpu) float64 { return float64(int64(g.powerW*1000+0.5)) / 1000 })
	field("DCGM_FI_DEV_GPU_UTIL", func(g *gpu) float64 { return float64(int64(g.util*100 + 0.5)) })
	field("DCGM_FI_DEV_FB_USED", func(g *gpu) float64 { return g.fbUsedMiB })
	field("DCGM_FI_DEV_XID_ERRORS", func(g *gpu) float64 { return float64(g.xid) })
	field("DCGM_FI_PROF_DRAM_ACTIVE", func(g *gpu) float64 { return float64(int64(g.dramActive*1e6+0.5)) / 1e6 })
	field("DCGM_FI_PROF_PCIE_TX_BYTES", func(g *gpu) float64 { return round1(g.pcieTx) })
	field("DCGM_FI_PROF_PCIE_RX_BYTES", func(g *gpu) float64 { return round1(g.pcieRx) })
	if !o.s.cfg.DCGMDefaultFields {
		field("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", func(g *gpu) float64 { return float64(g.reasons) })
	}
}
