package otlpfixture

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Load is a synthetic fleet for benchmarks: Hosts hosts with one vLLM
// engine and one GPU each, scraped every 10 s (engine) and 30 s (DCGM),
// serving requests that arrive uniformly.
type Load struct {
	Hosts    int
	Duration time.Duration
	Requests int // in total
	Seed     uint64
}

func loadHost(h int) string { return fmt.Sprintf("bench-node-%03d", h) }
func loadPod(h int) string  { return fmt.Sprintf("vllm-bench-%03d", h) }

// Metrics returns the scrapes in time order, one pmetric.Metrics per
// scrape interval holding every host.
func (l Load) Metrics() []pmetric.Metrics {
	var out []pmetric.Metrics
	for t := time.Duration(0); t <= l.Duration+30*time.Second; t += 10 * time.Second {
		md := pmetric.NewMetrics()
		for h := 0; h < l.Hosts; h++ {
			rm := md.ResourceMetrics().AppendEmpty()
			a := rm.Resource().Attributes()
			a.PutStr("service.name", "vllm")
			a.PutStr("host.name", loadHost(h))
			a.PutStr("k8s.pod.name", loadPod(h))
			sm := rm.ScopeMetrics().AppendEmpty()
			i := float64(t / (10 * time.Second))
			for _, g := range []struct {
				name string
				v    float64
			}{{"vllm:num_requests_running", 8}, {"vllm:num_requests_waiting", 1}, {"vllm:kv_cache_usage_perc", 0.4}} {
				m := sm.Metrics().AppendEmpty()
				m.SetName(g.name)
				dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
				dp.SetTimestamp(ts(t))
				dp.SetDoubleValue(g.v)
				dp.Attributes().PutStr("model_name", Model)
				dp.Attributes().PutStr("engine", "0")
			}
			for _, c := range []string{"vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"} {
				m := sm.Metrics().AppendEmpty()
				m.SetName(c)
				s := m.SetEmptySum()
				s.SetIsMonotonic(true)
				s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
				dp := s.DataPoints().AppendEmpty()
				dp.SetStartTimestamp(ts(-time.Hour))
				dp.SetTimestamp(ts(t))
				dp.SetDoubleValue(100 * i)
				dp.Attributes().PutStr("model_name", Model)
				dp.Attributes().PutStr("engine", "0")
			}
			if t%(30*time.Second) == 0 {
				rg := md.ResourceMetrics().AppendEmpty()
				rg.Resource().Attributes().PutStr("service.name", "dcgm-exporter")
				sg := rg.ScopeMetrics().AppendEmpty()
				for _, f := range []struct {
					name string
					v    float64
				}{{"DCGM_FI_DEV_SM_CLOCK", 1980}, {"DCGM_FI_DEV_GPU_TEMP", 60}, {"DCGM_FI_DEV_POWER_USAGE", 500}, {"DCGM_FI_PROF_DRAM_ACTIVE", 0.4}, {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 0}} {
					m := sg.Metrics().AppendEmpty()
					m.SetName(f.name)
					dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
					dp.SetTimestamp(ts(t))
					dp.SetDoubleValue(f.v)
					l := dp.Attributes()
					l.PutStr("gpu", "0")
					l.PutStr("UUID", fmt.Sprintf("GPU-bench-%03d", h))
					l.PutStr("Hostname", loadHost(h))
					l.PutStr("pod", loadPod(h))
				}
			}
		}
		out = append(out, md)
	}
	return out
}

// MetricPoints is the number of points Metrics returns.
func (l Load) MetricPoints() int {
	n := 0
	for _, md := range l.Metrics() {
		n += md.DataPointCount()
	}
	return n
}

// Traces returns the requests in batches of `per` spans (one resource per
// batch), in end-time order.
func (l Load) Traces(per int) []ptrace.Traces {
	r := rand.New(rand.NewPCG(l.Seed, 7))
	var out []ptrace.Traces
	var td ptrace.Traces
	var ss ptrace.ScopeSpans
	step := l.Duration / time.Duration(l.Requests)
	for k := 0; k < l.Requests; k++ {
		if k%per == 0 {
			td = ptrace.NewTraces()
			out = append(out, td)
		}
		h := r.IntN(l.Hosts)
		rs := td.ResourceSpans().AppendEmpty()
		a := rs.Resource().Attributes()
		a.PutStr("service.name", Service)
		a.PutStr("host.name", loadHost(h))
		a.PutStr("k8s.pod.name", loadPod(h))
		ss = rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("vllm.llm_engine")
		sp := ss.Spans().AppendEmpty()
		var tid pcommon.TraceID
		binary.BigEndian.PutUint64(tid[:8], l.Seed+1)
		binary.BigEndian.PutUint64(tid[8:], uint64(k+1))
		var sid pcommon.SpanID
		binary.BigEndian.PutUint64(sid[:], uint64(k+1))
		sp.SetTraceID(tid)
		sp.SetSpanID(sid)
		sp.SetName("llm_request")
		sp.SetKind(ptrace.SpanKindServer)
		dur := time.Duration(500+r.IntN(4000)) * time.Millisecond
		end := time.Duration(k)*step + 5*time.Second
		sp.SetStartTimestamp(ts(end - dur))
		sp.SetEndTimestamp(ts(end))
		at := sp.Attributes()
		at.PutDouble("gen_ai.latency.time_to_first_token", 0.2)
		at.PutDouble("gen_ai.latency.e2e", dur.Seconds())
		at.PutDouble("gen_ai.latency.time_in_queue", 0.01)
		at.PutDouble("gen_ai.latency.time_in_model_prefill", 0.19)
		at.PutDouble("gen_ai.latency.time_in_model_decode", dur.Seconds()-0.2)
		at.PutInt("gen_ai.usage.prompt_tokens", int64(200+r.IntN(4000)))
		at.PutInt("gen_ai.usage.completion_tokens", int64(20+r.IntN(400)))
		at.PutStr("gen_ai.request.id", fmt.Sprintf("cmpl-b%d", k))
		at.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
		at.PutStr("gen_ai.request.model", Model)
	}
	return out
}
