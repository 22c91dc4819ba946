package promexpo

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tailcause/tailcause/internal/otlpfixture"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// sample builds one Metrics with every supported shape.
func sample() pmetric.Metrics {
	md := pmetric.NewMetrics()
	sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
	ts := pcommon.NewTimestampFromTime(t0)

	g := sm.Metrics().AppendEmpty()
	g.SetName("vllm:kv_cache_usage_perc")
	g.SetDescription("KV-cache usage.\n1 means 100 percent.")
	dp := g.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(ts)
	dp.SetDoubleValue(0.25)
	dp.Attributes().PutStr("model_name", `meta/llama "3" \ 8b`)
	dp.Attributes().PutStr("engine", "0")

	c := sm.Metrics().AppendEmpty()
	c.SetName("vllm:num_preemptions") // gets _total
	s := c.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	cp := s.DataPoints().AppendEmpty()
	cp.SetTimestamp(ts)
	cp.SetIntValue(7)
	cp.Attributes().PutStr("k8s.pod.name", "vllm-0") // sanitised
	cp.Attributes().PutInt("9lives", 9)              // leading digit

	u := sm.Metrics().AppendEmpty()
	u.SetName("updown")
	us := u.SetEmptySum()
	us.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	up := us.DataPoints().AppendEmpty()
	up.SetDoubleValue(math.Inf(-1)) // no timestamp: none written

	h := sm.Metrics().AppendEmpty()
	h.SetName("vllm:e2e_request_latency_seconds")
	hh := h.SetEmptyHistogram()
	hh.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	hp := hh.DataPoints().AppendEmpty()
	hp.SetTimestamp(ts)
	hp.ExplicitBounds().FromRaw([]float64{0.5, 1, 2.5})
	hp.BucketCounts().FromRaw([]uint64{1, 2, 3, 4})
	hp.SetCount(10)
	hp.SetSum(17.5)
	hp.Attributes().PutStr("model_name", "m")

	q := sm.Metrics().AppendEmpty()
	q.SetName("rpc_seconds")
	qp := q.SetEmptySummary().DataPoints().AppendEmpty()
	qp.SetTimestamp(ts)
	qp.SetCount(3)
	qp.SetSum(1.5)
	qv := qp.QuantileValues().AppendEmpty()
	qv.SetQuantile(0.99)
	qv.SetValue(0.9)

	skip := sm.Metrics().AppendEmpty()
	skip.SetName("vllm:num_requests_running")
	sp := skip.SetEmptyGauge().DataPoints().AppendEmpty()
	sp.SetTimestamp(ts)
	sp.SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
	return md
}

func TestAppendGolden(t *testing.T) {
	got, err := Append(nil, Options{}, sample())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sample.txt", got)
	// The output parses as the text format.
	parse(t, got)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func parse(t *testing.T, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parse exposition: %v\n%s", err, text)
	}
	return fams
}

// TestFixtureRoundTrip renders the otlp fixture's scrapes and reads them
// back with Prometheus' own text parser: every name, label, value and
// timestamp survives.
func TestFixtureRoundTrip(t *testing.T) {
	for i, md := range otlpfixture.Metrics() {
		text, err := Append(nil, Options{}, md)
		if err != nil {
			t.Fatal(err)
		}
		fams := parse(t, text)
		want := 0
		rm := md.ResourceMetrics().At(0)
		ms := rm.ScopeMetrics().At(0).Metrics()
		for k := 0; k < ms.Len(); k++ {
			m := ms.At(k)
			want++
			f := fams[m.Name()]
			if f == nil {
				t.Fatalf("scrape %d: %s missing from\n%s", i, m.Name(), text)
			}
			var dp pmetric.NumberDataPoint
			if m.Type() == pmetric.MetricTypeGauge {
				dp = m.Gauge().DataPoints().At(0)
				if f.GetType() != dto.MetricType_GAUGE {
					t.Errorf("%s: type %v", m.Name(), f.GetType())
				}
			} else {
				dp = m.Sum().DataPoints().At(0)
				if f.GetType() != dto.MetricType_COUNTER {
					t.Errorf("%s: type %v", m.Name(), f.GetType())
				}
			}
			pm := f.GetMetric()[0]
			v := pm.GetGauge().GetValue() + pm.GetCounter().GetValue()
			if v != dp.DoubleValue() {
				t.Errorf("%s = %v, want %v", m.Name(), v, dp.DoubleValue())
			}
			if got, want := pm.GetTimestampMs(), int64(dp.Timestamp())/1e6; got != want {
				t.Errorf("%s timestamp %d, want %d", m.Name(), got, want)
			}
			labels := map[string]string{}
			for _, l := range pm.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range dp.Attributes().All() {
				if labels[k] != v.AsString() {
					t.Errorf("%s label %s = %q, want %q", m.Name(), k, labels[k], v.AsString())
				}
			}
			if len(labels) != dp.Attributes().Len() {
				t.Errorf("%s labels %v", m.Name(), labels)
			}
		}
		if len(fams) != want {
			t.Errorf("scrape %d: %d families, want %d", i, len(fams), want)
		}
	}
}

func TestFamiliesMergeAcrossResources(t *testing.T) {
	md := pmetric.NewMetrics()
	for _, host := range []string{"a", "b"} {
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("host.name", host)
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("DCGM_FI_DEV_GPU_TEMP")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetIntValue(60)
		dp.Attributes().PutStr("Hostname", host)
	}
	got, err := Append([]byte("# prefix\n"), Options{OmitTimestamps: true}, md)
	if err != nil {
		t.Fatal(err)
	}
	want := "# prefix\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" +
		"DCGM_FI_DEV_GPU_TEMP{Hostname=\"a\"} 60\nDCGM_FI_DEV_GPU_TEMP{Hostname=\"b\"} 60\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	parse(t, got)
}

func TestAppendErrors(t *testing.T) {
	f := func(name string, build func(m pmetric.Metric)) {
		t.Helper()
		md := pmetric.NewMetrics()
		sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		build(m)
		dst := []byte("keep")
		out, err := Append(dst, Options{}, md)
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst changed to %q", name, out)
		}
	}
	f("delta_sum", func(m pmetric.Metric) {
		s := m.SetEmptySum()
		s.SetIsMonotonic(true)
		s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	})
	f("delta_hist", func(m pmetric.Metric) {
		m.SetEmptyHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	})
	f("exp_hist", func(m pmetric.Metric) { m.SetEmptyExponentialHistogram() })
	f("empty", func(pmetric.Metric) {})

	// The same name as a gauge and as a counter.
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	ms.AppendEmpty().SetName("x_total")
	ms.At(0).SetEmptyGauge()
	c := ms.AppendEmpty()
	c.SetName("x")
	c.SetEmptySum().SetIsMonotonic(true)
	c.Sum().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	if _, err := Append(nil, Options{}, md); err == nil || errors.Is(err, ErrUnsupported) {
		t.Errorf("type conflict: %v", err)
	}
}

func TestSanitizeName(t *testing.T) {
	for in, want := range map[string]string{
		"ok_name": "ok_name", "vllm:x": "vllm:x", "k8s.pod.name": "k8s_pod_name", "9a": "_9a", "": "_", "a-b c": "a_b_c",
	} {
		if got := sanitizeName(in, true); got != want {
			t.Errorf("sanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
	if got := sanitizeName("a:b", false); got != "a_b" {
		t.Errorf("label a:b -> %q", got)
	}
}

func TestHandler(t *testing.T) {
	h := NewHandler(Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(method string) string {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if method != http.MethodPost && resp.Header.Get("Content-Type") != ContentType {
			t.Errorf("content type %q", resp.Header.Get("Content-Type"))
		}
		if method == http.MethodPost && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST: %s", resp.Status)
		}
		return string(b)
	}
	if got := get(http.MethodGet); got != "" {
		t.Errorf("empty handler served %q", got)
	}
	scrapes := otlpfixture.Metrics()[:3]
	if err := h.Enqueue(scrapes...); err != nil {
		t.Fatal(err)
	}
	if err := h.Set(sample()); err != nil {
		t.Fatal(err)
	}
	if h.Pending() != 3 {
		t.Fatalf("pending %d", h.Pending())
	}
	get(http.MethodHead) // does not take from the queue
	for i, md := range scrapes {
		want, _ := Append(nil, Options{}, md)
		if got := get(http.MethodGet); got != string(want) {
			t.Errorf("scrape %d:\n%s\nwant\n%s", i, got, want)
		}
	}
	steady, _ := Append(nil, Options{}, sample())
	for range 2 {
		if got := get(http.MethodGet); got != string(steady) {
			t.Errorf("steady content:\n%s", got)
		}
	}
	get(http.MethodPost)
	if h.Pending() != 0 || h.Served() != 6 {
		t.Errorf("pending %d served %d", h.Pending(), h.Served())
	}
	if !strings.Contains(string(steady), "vllm:num_preemptions_total{k8s_pod_name=") {
		t.Errorf("steady content lacks the counter:\n%s", steady)
	}
	big := make([][]byte, MaxQueue+1)
	if err := h.EnqueueText(big...); !errors.Is(err, ErrQueueFull) {
		t.Errorf("over-full queue: %v", err)
	}
}

// TestSplitByTimestamp: a batch of several scrapes becomes one Metrics
// per scrape time, in order, with every point kept exactly once.
func TestSplitByTimestamp(t *testing.T) {
	batch := pmetric.NewMetrics()
	scrapes := otlpfixture.Metrics()
	for i := len(scrapes) - 1; i >= 0; i-- { // out of order on purpose
		scrapes[i].ResourceMetrics().MoveAndAppendTo(batch.ResourceMetrics())
	}
	total := batch.DataPointCount()
	parts := SplitByTimestamp(batch)
	if len(parts) != otlpfixture.EngineScrapes {
		t.Fatalf("%d parts, want %d (one per engine scrape time)", len(parts), otlpfixture.EngineScrapes)
	}
	sum := 0
	var last pcommon.Timestamp
	for i, p := range parts {
		sum += p.DataPointCount()
		var first pcommon.Timestamp
		forEachPoint(p, func(ts pcommon.Timestamp) bool {
			if first == 0 {
				first = ts
			}
			if ts != first {
				t.Errorf("part %d mixes timestamps %d and %d", i, first, ts)
			}
			return false
		})
		if i > 0 && first <= last {
			t.Errorf("part %d at %d does not follow %d", i, first, last)
		}
		last = first
		// Each part renders as a valid exposition with one sample per series.
		text, err := Append(nil, Options{}, p)
		if err != nil {
			t.Fatal(err)
		}
		parse(t, text)
	}
	if sum != total || batch.DataPointCount() != total {
		t.Errorf("points: %d in parts, %d in the batch after, want %d", sum, batch.DataPointCount(), total)
	}
	h := NewHandler(Options{})
	if err := h.Metrics(context.Background(), batch); err != nil || h.Pending() != len(parts) {
		t.Errorf("Handler.Metrics queued %d (%v), want %d", h.Pending(), err, len(parts))
	}
}

func BenchmarkAppend(b *testing.B) {
	md := pmetric.NewMetrics()
	for _, s := range otlpfixture.Metrics() {
		s.ResourceMetrics().MoveAndAppendTo(md.ResourceMetrics())
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = Append(buf[:0], Options{}, md); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}
