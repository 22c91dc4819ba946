package faultlab

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// The allow-list: every name below is spelled as in
// shared/reference/telemetry.md (what vLLM, SGLang, dcgm-exporter and the
// Collector's prometheus receiver really emit). The only name of our own is
// SGLang's instrumentation scope, which telemetry.md does not fix.
var (
	allowedSpanNames = []string{"llm_request", "decode_loop", "prefill_forward", "chunked_prefill"}
	sglangRootName   = regexp.MustCompile(`^ Req [0-9a-f]{8}$`)
	allowedScopes    = []string{"vllm.llm_engine", "sglang", scopePromRecv}
	allowedSpanAttrs = []string{
		"gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e", "gen_ai.latency.time_in_queue",
		"gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode",
		"gen_ai.latency.time_in_model_inference", "gen_ai.usage.prompt_tokens",
		"gen_ai.usage.completion_tokens", "gen_ai.request.id", "gen_ai.response.finish_reasons",
		"gen_ai.request.max_tokens", "gen_ai.request.top_p", "gen_ai.request.temperature", "gen_ai.request.n",
		"rid", "module", "gen_ai.usage.cached_tokens", "gen_ai.response.model", "gen_ai.request.top_k",
		"decode_ct",
	}
	allowedEvents       = []string{"retract", "schedule"}
	allowedSpanResource = []string{"service.name", "host.name", "k8s.pod.name", "k8s.namespace.name", "service.instance.id"}
	allowedVLLMMetrics  = []string{
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
		"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prompt_tokens_recomputed_total",
		"vllm:request_success_total", "vllm:iteration_tokens_total",
	}
	allowedDCGMMetrics = []string{
		"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
		"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_PROF_DRAM_ACTIVE",
		"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
	}
	vllmCounters        = []string{"vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prompt_tokens_recomputed_total", "vllm:request_success_total"}
	allowedVLLMLabels   = []string{"model_name", "engine", "finished_reason"}
	allowedDCGMLabels   = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "pod", "namespace", "container"}
	allowedMetricRes    = []string{"service.name", "service.instance.id", "host.name", "k8s.pod.name", "k8s.namespace.name"}
	allowedFinishReason = []string{`["stop"]`, `["length"]`, `["abort"]`, `["error"]`, `["repetition"]`}
)

// nameCheck is a Sink that checks every batch against the allow-list.
type nameCheck struct {
	t          *testing.T
	mu         sync.Mutex
	seenSpans  map[string]bool
	seenMetric map[string]bool
	errors     int
}

func (n *nameCheck) fail(format string, a ...any) {
	n.errors++
	if n.errors <= 20 {
		n.t.Errorf(format, a...)
	}
}

func (n *nameCheck) keys(what string, m pcommon.Map, allowed []string) {
	for k := range m.All() {
		if !slices.Contains(allowed, k) {
			n.fail("%s: attribute %q is not in the allow-list", what, k)
		}
	}
}

func (n *nameCheck) Traces(_ context.Context, td ptrace.Traces) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, rs := range td.ResourceSpans().All() {
		n.keys("span resource", rs.Resource().Attributes(), allowedSpanResource)
		for _, k := range allowedSpanResource {
			if _, ok := rs.Resource().Attributes().Get(k); !ok {
				n.fail("span resource lacks %s", k)
			}
		}
		for _, ss := range rs.ScopeSpans().All() {
			if !slices.Contains(allowedScopes, ss.Scope().Name()) {
				n.fail("scope %q", ss.Scope().Name())
			}
			for _, sp := range ss.Spans().All() {
				name := sp.Name()
				root := sp.ParentSpanID().IsEmpty()
				switch {
				case sglangRootName.MatchString(name):
					n.seenSpans["<sglang root>"] = true
					if tid := sp.TraceID(); !root || !slices.Equal(tid[:8], make([]byte, 8)) {
						n.fail("SGLang root %q: parent %v, trace id %v (want a root with 64 random bits)", name, sp.ParentSpanID(), tid)
					}
				case slices.Contains(allowedSpanNames, name):
					n.seenSpans[name] = true
					if (name == "llm_request") != root {
						n.fail("span %q root=%v", name, root)
					}
				default:
					n.fail("span name %q is not in the allow-list", name)
				}
				n.keys("span "+name, sp.Attributes(), allowedSpanAttrs)
				for _, ev := range sp.Events().All() {
					if !slices.Contains(allowedEvents, ev.Name()) {
						n.fail("event %q", ev.Name())
					}
					n.seenSpans["event "+ev.Name()] = true
				}
				if sp.EndTimestamp() < sp.StartTimestamp() {
					n.fail("span %q ends before it starts", name)
				}
				if !root {
					continue
				}
				if sp.Kind() != ptrace.SpanKindServer {
					n.fail("root span %q kind %v", name, sp.Kind())
				}
				a := sp.Attributes()
				fr, ok := a.Get("gen_ai.response.finish_reasons")
				if !ok || fr.Type() != pcommon.ValueTypeStr || !slices.Contains(allowedFinishReason, fr.Str()) {
					n.fail("finish_reasons %v", fr.AsRaw())
				}
				var parsed []string
				if json.Unmarshal([]byte(fr.Str()), &parsed) != nil || len(parsed) != 1 {
					n.fail("finish_reasons %q is not JSON text of one reason", fr.Str())
				}
				if (fr.Str() == `["abort"]`) != (sp.Status().Code() == ptrace.StatusCodeError) {
					n.fail("finish %s with status %v", fr.Str(), sp.Status().Code())
				}
				e2e, _ := a.Get("gen_ai.latency.e2e")
				dur := float64(sp.EndTimestamp()-sp.StartTimestamp()) / 1e9
				if e2e.Type() != pcommon.ValueTypeDouble || e2e.Double() < 0 || e2e.Double()-dur > 1e-6 || dur-e2e.Double() > 1e-6 {
					n.fail("e2e %v for a span of %vs", e2e.AsRaw(), dur)
				}
				for k, v := range a.All() {
					if strings.HasPrefix(k, "gen_ai.latency.") && (v.Type() != pcommon.ValueTypeDouble || v.Double() < 0 || v.Double() > e2e.Double()+1e-9) {
						n.fail("%s = %v (e2e %v): want float seconds within e2e", k, v.AsRaw(), e2e.Double())
					}
					if strings.HasPrefix(k, "gen_ai.usage.") && v.Type() != pcommon.ValueTypeInt {
						n.fail("%s is %v, want int", k, v.Type())
					}
				}
			}
		}
	}
	return nil
}

func (n *nameCheck) Metrics(_ context.Context, md pmetric.Metrics) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, rm := range md.ResourceMetrics().All() {
		ra := rm.Resource().Attributes()
		n.keys("metric resource", ra, allowedMetricRes)
		job, _ := ra.Get("service.name")
		inst, _ := ra.Get("service.instance.id")
		host, _ := ra.Get("host.name")
		if !strings.HasPrefix(inst.Str(), host.Str()+":") {
			n.fail("service.instance.id %q is not host:port of %q", inst.Str(), host.Str())
		}
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				n.seenMetric[m.Name()] = true
				var allowedNames, labels []string
				switch job.Str() {
				case "vllm":
					allowedNames, labels = allowedVLLMMetrics, allowedVLLMLabels
				case "dcgm-exporter":
					allowedNames, labels = allowedDCGMMetrics, allowedDCGMLabels
				default:
					n.fail("job %q", job.Str())
				}
				if !slices.Contains(allowedNames, m.Name()) {
					n.fail("metric %q (job %s) is not in the allow-list", m.Name(), job.Str())
				}
				counter := slices.Contains(vllmCounters, m.Name())
				var dps pmetric.NumberDataPointSlice
				if m.Name() == "vllm:iteration_tokens_total" {
					h := m.Histogram()
					if m.Type() != pmetric.MetricTypeHistogram || h.AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
						n.fail("%s: not a cumulative histogram (%v)", m.Name(), m.Type())
						continue
					}
					for _, hp := range h.DataPoints().All() {
						n.keys(m.Name(), hp.Attributes(), labels)
						var total uint64
						for _, c := range hp.BucketCounts().All() {
							total += c
						}
						if hp.BucketCounts().Len() != hp.ExplicitBounds().Len()+1 || total != hp.Count() || hp.StartTimestamp() == 0 {
							n.fail("%s: %d buckets for %d bounds, %d counted of %d, start %v", m.Name(), hp.BucketCounts().Len(), hp.ExplicitBounds().Len(), total, hp.Count(), hp.StartTimestamp())
						}
					}
					continue
				}
				switch {
				case counter && m.Type() == pmetric.MetricTypeSum:
					s := m.Sum()
					if !s.IsMonotonic() || s.AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
						n.fail("%s: counter not a monotonic cumulative sum", m.Name())
					}
					dps = s.DataPoints()
				case !counter && m.Type() == pmetric.MetricTypeGauge:
					dps = m.Gauge().DataPoints()
				default:
					n.fail("%s: type %v", m.Name(), m.Type())
					continue
				}
				for _, dp := range dps.All() {
					n.keys(m.Name(), dp.Attributes(), labels)
					if counter && (dp.StartTimestamp() == 0 || dp.StartTimestamp() > dp.Timestamp()) {
						n.fail("%s: start %v, time %v", m.Name(), dp.StartTimestamp(), dp.Timestamp())
					}
					v := dp.DoubleValue()
					switch m.Name() {
					case "vllm:kv_cache_usage_perc", "DCGM_FI_PROF_DRAM_ACTIVE":
						if v < 0 || v > 1 {
							n.fail("%s = %v, want a 0-1 ratio", m.Name(), v)
						}
					case "DCGM_FI_DEV_GPU_UTIL":
						if v < 0 || v > 100 {
							n.fail("%s = %v, want 0-100", m.Name(), v)
						}
					}
					if job.Str() == "vllm" {
						for _, k := range []string{"model_name", "engine"} {
							if _, ok := dp.Attributes().Get(k); !ok {
								n.fail("%s lacks label %s", m.Name(), k)
							}
						}
					}
					if job.Str() == "dcgm-exporter" {
						for _, k := range allowedDCGMLabels {
							if _, ok := dp.Attributes().Get(k); !ok {
								n.fail("%s lacks label %s", m.Name(), k)
							}
						}
					}
				}
			}
		}
	}
	return nil
}

func TestTelemetryNames(t *testing.T) {
	cfg := scenarioConfig(t, "xid_error", 6*time.Minute, 5)
	cfg.StepSpanShare = 0.5
	cfg.Scenario.Faults = append(cfg.Scenario.Faults, FaultSpec{Cause: "kv_cache.preemption",
		Target: Target{Pod: "llama-3-1-8b-3"}, Onset: "20%", Duration: "60%", Magnitude: 0.97})
	n := &nameCheck{t: t, seenSpans: map[string]bool{}, seenMetric: map[string]bool{}}
	if _, err := Run(context.Background(), cfg, n); err != nil {
		t.Fatal(err)
	}
	// Everything the simulator can emit was emitted, so the check covered it.
	for _, s := range []string{"llm_request", "<sglang root>", "decode_loop", "prefill_forward", "chunked_prefill", "event retract"} {
		if !n.seenSpans[s] {
			t.Errorf("never emitted %s", s)
		}
	}
	for _, m := range append(slices.Clone(allowedVLLMMetrics), allowedDCGMMetrics...) {
		if !n.seenMetric[m] {
			t.Errorf("never emitted %s", m)
		}
	}
}

// TestDCGMDefaultFields: with dcgm-exporter's default field set the lab
// emits every DCGM field but the clock-event reasons.
func TestDCGMDefaultFields(t *testing.T) {
	cfg := scenarioConfig(t, "thermal_throttle", 3*time.Minute, 5)
	cfg.DCGMDefaultFields = true
	n := &nameCheck{t: t, seenSpans: map[string]bool{}, seenMetric: map[string]bool{}}
	if _, err := Run(context.Background(), cfg, n); err != nil {
		t.Fatal(err)
	}
	for _, m := range allowedDCGMMetrics {
		if got, want := n.seenMetric[m], m != "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"; got != want {
			t.Errorf("emitted %s: %v, want %v", m, got, want)
		}
	}
}
