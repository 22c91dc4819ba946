package normalize

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tailcause/tailcause/internal/otlpfixture"
)

// sameAsPdata checks MetricsProto against pdata on pb (wireMatchesPdata).
func sameAsPdata(t testing.TB, pb []byte) bool {
	t.Helper()
	return wireMatchesPdata(t, pb, MetricsProto, DecodeMetrics, Metrics)
}

// wireMatchesPdata checks a wire path against pdata on pb: when wire takes
// pb, pdata (decode, then normalize) must accept pb and normalize it to
// the same Batch. It reports whether the wire path took pb.
func wireMatchesPdata[T any](t testing.TB, pb []byte, wire func([]byte) (Batch, bool), decode func([]byte, Encoding) (T, error), normalize func(T) Batch) bool {
	t.Helper()
	got, ok := wire(pb)
	if !ok {
		return false
	}
	td, err := decode(pb, EncodingProto)
	if err != nil {
		t.Fatalf("the wire path took a payload pdata refuses: %v", err)
	}
	if diff := cmp.Diff(normalize(td), got, cmpopts.EquateNaNs()); diff != "" {
		t.Fatalf("wire path and pdata disagree (-pdata +wire):\n%s", diff)
	}
	return true
}

func marshalMetrics(t testing.TB, md pmetric.Metrics) []byte {
	t.Helper()
	var m pmetric.ProtoMarshaler
	pb, err := m.MarshalMetrics(md)
	if err != nil {
		t.Fatal(err)
	}
	return pb
}

// metricsProtoCases are payloads in the shapes the wire path takes, each
// exercising one rule of Metrics.
func metricsProtoCases() map[string]pmetric.Metrics {
	cases := map[string]pmetric.Metrics{}
	add := func(name string, f func(rm pmetric.ResourceMetrics, ms pmetric.MetricSlice)) {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		f(rm, rm.ScopeMetrics().AppendEmpty().Metrics())
		cases[name] = md
	}
	ts := pcommon.NewTimestampFromTime(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	gauge := func(ms pmetric.MetricSlice, name string, v float64) pmetric.NumberDataPoint {
		m := ms.AppendEmpty()
		m.SetName(name)
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(ts)
		dp.SetDoubleValue(v)
		return dp
	}
	add("engine", func(rm pmetric.ResourceMetrics, ms pmetric.MetricSlice) {
		a := rm.Resource().Attributes()
		a.PutStr("k8s.node.name", "node-1")
		a.PutStr("host.name", "host-a")
		a.PutStr("host.name", "host-b") // the first wins
		a.PutStr("k8s.pod.name", "pod-1")
		a.PutStr("server.address", "10.0.0.1:8000")
		dp := gauge(ms, "vllm:num_requests_running", 3)
		dp.Attributes().PutStr("model_name", "llama")
		dp.Attributes().PutStr("engine", "1")
		dp = gauge(ms, "sglang:num_running_reqs", 2)
		dp.Attributes().PutStr("dp_rank", "4")
		m := ms.AppendEmpty()
		m.SetName("vllm:num_preemptions_total")
		s := m.SetEmptySum()
		s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		s.SetIsMonotonic(true)
		p := s.DataPoints().AppendEmpty()
		p.SetTimestamp(ts)
		p.SetStartTimestamp(ts - 1e9)
		p.SetIntValue(7)
		// A counter sent as a gauge: cumulative, start unknown.
		gauge(ms, "vllm:prompt_tokens_total", 11).SetStartTimestamp(ts - 1e9)
	})
	add("address fallback", func(rm pmetric.ResourceMetrics, ms pmetric.MetricSlice) {
		rm.Resource().Attributes().PutStr("server.address", "10.0.0.2:8000")
		gauge(ms, "tgi_queue_size", 1)
		gauge(ms, "DCGM_FI_DEV_GPU_TEMP", 60)
	})
	add("gpu", func(rm pmetric.ResourceMetrics, ms pmetric.MetricSlice) {
		rm.Resource().Attributes().PutStr("host.name", "exporter-node")
		dp := gauge(ms, "DCGM_FI_DEV_GPU_UTIL", 55) // percent
		for _, kv := range [][2]string{{"hostname", "h"}, {"Hostname", "H"}, {"uuid", "u"}, {"gpu", "0"}, {"pod", "p"}, {"namespace", "n"}, {"other", "x"}} {
			dp.Attributes().PutStr(kv[0], kv[1])
		}
		gauge(ms, "DCGM_FI_DEV_SM_CLOCK", 1400).Attributes().PutStr("UUID", "GPU-1")
	})
	add("xid sums", func(_ pmetric.ResourceMetrics, ms pmetric.MetricSlice) {
		m := ms.AppendEmpty()
		m.SetName("DCGM_EXP_XID_ERRORS_COUNT")
		g := m.SetEmptyGauge()
		for i, xid := range []string{"13", "31", "43"} {
			dp := g.DataPoints().AppendEmpty()
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(float64(i + 1))
			dp.Attributes().PutStr("xid", xid)
			dp.Attributes().PutStr("UUID", "GPU-1")
		}
	})
	add("ignored and rejected", func(_ pmetric.ResourceMetrics, ms pmetric.MetricSlice) {
		gauge(ms, "unknown_metric", 1)
		gauge(ms, "vllm:num_requests_waiting", math.NaN())
		gauge(ms, "vllm:num_requests_waiting", math.Inf(1))
		gauge(ms, "vllm:num_requests_waiting", 1).SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
		gauge(ms, "vllm:num_requests_waiting", 1).SetTimestamp(0)
		m := ms.AppendEmpty()
		m.SetName("vllm:num_requests_waiting")
		m.SetEmptyGauge().DataPoints().AppendEmpty().SetTimestamp(ts) // no value
		m = ms.AppendEmpty()
		m.SetName("vllm:prompt_tokens")
		d := m.SetEmptySum()
		d.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
		d.DataPoints().AppendEmpty().SetTimestamp(ts)
		ms.AppendEmpty().SetName("vllm:num_requests_running") // no data
		m = ms.AppendEmpty()
		m.SetName("vllm:e2e_request_latency_seconds")
		h := m.SetEmptyHistogram()
		hp := h.DataPoints().AppendEmpty()
		hp.SetTimestamp(ts)
		hp.SetCount(3)
		hp.SetSum(1.5)
		hp.BucketCounts().FromRaw([]uint64{1, 2})
		hp.ExplicitBounds().FromRaw([]float64{0.5})
		hp.Attributes().PutStr("model_name", "llama")
		h.DataPoints().AppendEmpty()
	})
	add("step histogram", func(_ pmetric.ResourceMetrics, ms pmetric.MetricSlice) {
		m := ms.AppendEmpty()
		m.SetName("vllm:iteration_tokens_total")
		h := m.SetEmptyHistogram()
		h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		point := func(bounds []float64, counts []uint64) pmetric.HistogramDataPoint {
			hp := h.DataPoints().AppendEmpty()
			hp.SetTimestamp(ts)
			hp.SetStartTimestamp(ts - 60e9)
			hp.BucketCounts().FromRaw(counts)
			hp.ExplicitBounds().FromRaw(bounds)
			hp.Attributes().PutStr("model_name", "llama")
			return hp
		}
		point([]float64{16, 2048}, []uint64{90, 9, 1}).Attributes().PutStr("engine", "1")
		point([]float64{2048, 16}, []uint64{1, 1, 1})                                                          // bounds not ascending
		point([]float64{16}, []uint64{1})                                                                      // a count short
		point(nil, []uint64{4})                                                                                // no bounds
		point([]float64{16}, []uint64{1, 2}).SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true)) // stale
		point([]float64{16}, []uint64{1, 2}).SetTimestamp(0)                                                   // no time
		m = ms.AppendEmpty()
		m.SetName("vllm:iteration_tokens")
		d := m.SetEmptyHistogram()
		d.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
		d.DataPoints().AppendEmpty().SetTimestamp(ts)
	})
	add("empty", func(pmetric.ResourceMetrics, pmetric.MetricSlice) {})
	cases["no resources"] = pmetric.NewMetrics()
	return cases
}

// TestMetricsProtoMatchesPdata: on the fixtures, the benchmark fleet's
// scrapes and payloads made to exercise each rule, the wire path takes the
// payload and normalizes it exactly as pdata and Metrics do.
func TestMetricsProtoMatchesPdata(t *testing.T) {
	for name, md := range metricsProtoCases() {
		if !sameAsPdata(t, marshalMetrics(t, md)) {
			t.Errorf("%s: the wire path declined it", name)
		}
	}
	paths, _ := filepath.Glob(filepath.Join("testdata", "*_metrics.json"))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		md, err := DecodeMetrics(raw, EncodingJSON)
		if err != nil {
			t.Fatal(err)
		}
		if !sameAsPdata(t, marshalMetrics(t, md)) {
			t.Errorf("%s: the wire path declined it", p)
		}
	}
	for _, md := range otlpfixture.Metrics() {
		if !sameAsPdata(t, marshalMetrics(t, md)) {
			t.Error("otlpfixture.Metrics: the wire path declined a scrape")
		}
	}
	l := otlpfixture.Load{Hosts: 8, Duration: 2 * time.Minute, Requests: 10, Seed: 1}
	for _, md := range l.Metrics() {
		if !sameAsPdata(t, marshalMetrics(t, md)) {
			t.Fatal("otlpfixture.Load: the wire path declined a scrape")
		}
	}
}

// TestMetricsDecoderReuse: one decoder over many records gives each the
// Batch pdata and Metrics give it (nothing of one record leaks into the
// next, declined ones included).
func TestMetricsDecoderReuse(t *testing.T) {
	var payloads [][]byte
	for _, md := range metricsProtoCases() {
		payloads = append(payloads, marshalMetrics(t, md))
	}
	for _, md := range otlpfixture.Metrics() {
		payloads = append(payloads, marshalMetrics(t, md), []byte{0x0a, 0x7f})
	}
	l := otlpfixture.Load{Hosts: 4, Duration: time.Minute, Requests: 10, Seed: 2}
	for _, md := range l.Metrics() {
		payloads = append(payloads, marshalMetrics(t, md))
	}
	for _, reuse := range []bool{false, true} {
		decodeAll(t, &MetricsDecoder{ReuseSamples: reuse}, payloads)
	}
}

func decodeAll(t *testing.T, d *MetricsDecoder, payloads [][]byte) {
	t.Helper()
	for i, pb := range payloads {
		got, gotErr := d.Record(pb, EncodingProto)
		md, err := DecodeMetrics(pb, EncodingProto)
		if err != nil {
			if gotErr == nil || gotErr.Error() != err.Error() {
				t.Fatalf("payload %d: error %v, want %v", i, gotErr, err)
			}
			continue
		}
		if gotErr != nil {
			t.Fatalf("payload %d: %v", i, gotErr)
		}
		if diff := cmp.Diff(Metrics(md), got, cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("payload %d (-pdata +decoder):\n%s", i, diff)
		}
	}
}

// TestMetricsProtoDeclines: shapes the wire path leaves to pdata, and
// malformed payloads, which MetricsRecord still reports as DecodeMetrics
// does.
func TestMetricsProtoDeclines(t *testing.T) {
	ts := pcommon.NewTimestampFromTime(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	one := func(f func(dp pmetric.NumberDataPoint, m pmetric.Metric)) []byte {
		md := pmetric.NewMetrics()
		m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("vllm:num_requests_running")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(ts)
		dp.SetDoubleValue(1)
		f(dp, m)
		return marshalMetrics(t, md)
	}
	declined := map[string][]byte{
		"int attribute": one(func(dp pmetric.NumberDataPoint, _ pmetric.Metric) { dp.Attributes().PutInt("engine", 1) }),
		"exemplar":      one(func(dp pmetric.NumberDataPoint, _ pmetric.Metric) { dp.Exemplars().AppendEmpty() }),
		"metadata":      one(func(_ pmetric.NumberDataPoint, m pmetric.Metric) { m.Metadata().PutStr("a", "b") }),
		"summary": one(func(_ pmetric.NumberDataPoint, m pmetric.Metric) {
			m.SetEmptySummary().DataPoints().AppendEmpty()
		}),
		"unknown field": append(one(func(pmetric.NumberDataPoint, pmetric.Metric) {}), 0x98, 0x06, 0x01), // field 99, varint
	}
	for name, pb := range declined {
		if _, ok := MetricsProto(pb); ok {
			t.Errorf("%s: the wire path took it", name)
		}
		want, err := DecodeMetrics(pb, EncodingProto)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := MetricsRecord(pb, EncodingProto)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(Metrics(want), got, cmpopts.EquateNaNs()); diff != "" {
			t.Errorf("%s: MetricsRecord differs from pdata (-pdata +got):\n%s", name, diff)
		}
	}
	good := one(func(pmetric.NumberDataPoint, pmetric.Metric) {})
	for name, pb := range map[string][]byte{
		"truncated":      good[:len(good)-3],
		"bad wire type":  {0x0b},
		"field zero":     {0x02, 0x00},
		"overlong":       {0x0a, 0x7f},
		"varint too big": {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		if _, ok := MetricsProto(pb); ok {
			t.Errorf("%s: the wire path took it", name)
		}
		_, want := DecodeMetrics(pb, EncodingProto)
		_, got := MetricsRecord(pb, EncodingProto)
		if want == nil || got == nil || got.Error() != want.Error() {
			t.Errorf("%s: MetricsRecord error %v, DecodeMetrics error %v", name, got, want)
		}
	}
}

// FuzzMetricsProto holds the wire path to pdata: whatever it takes, pdata
// accepts and normalizes to the same Batch.
func FuzzMetricsProto(f *testing.F) {
	for _, md := range metricsProtoCases() {
		f.Add(marshalMetrics(f, md))
	}
	for _, md := range otlpfixture.Metrics() {
		f.Add(marshalMetrics(f, md))
	}
	paths, _ := filepath.Glob(filepath.Join("testdata", "*_metrics.json"))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if md, err := DecodeMetrics(raw, EncodingJSON); err == nil {
			f.Add(marshalMetrics(f, md))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsPdata(t, b) })
}
