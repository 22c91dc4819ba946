package faultlab

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// reqRec is one request span, reduced to what the property tests read.
type reqRec struct {
	pod        string
	start, end time.Duration // since the run start
	e2e        float64       // seconds (gen_ai.latency.e2e)
	ttft       float64       // seconds, NaN if none
	queue      float64
	prefill    float64
	decode     float64
	prompt     int64
	completion int64
	cached     int64
	failed     bool
	sglang     bool
}

func (r reqRec) tpot() float64 {
	if r.completion < 2 || math.IsNaN(r.decode) {
		return math.NaN()
	}
	return r.decode / float64(r.completion-1)
}

// pointRec is one metric data point.
type pointRec struct {
	name  string
	key   string // vLLM: pod; DCGM: host/gpu
	label string // finished_reason, if any
	at    time.Duration
	value float64
}

// capture is a Sink that keeps a compact copy of everything.
type capture struct {
	mu        sync.Mutex
	start     time.Time
	reqs      []reqRec
	points    []pointRec
	stepSpans map[string]int
	spans     int
}

func newCapture(start time.Time) *capture {
	return &capture{start: start, stepSpans: map[string]int{}}
}

func (c *capture) since(ts pcommon.Timestamp) time.Duration {
	return ts.AsTime().Sub(c.start)
}

func (c *capture) Traces(_ context.Context, td ptrace.Traces) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range td.ResourceSpans().All() {
		pod, _ := rs.Resource().Attributes().Get("k8s.pod.name")
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				c.spans++
				if !sp.ParentSpanID().IsEmpty() {
					c.stepSpans[sp.Name()]++
					continue
				}
				a := sp.Attributes()
				f := func(k string) float64 {
					if v, ok := a.Get(k); ok {
						return v.Double()
					}
					return math.NaN()
				}
				i := func(k string) int64 {
					if v, ok := a.Get(k); ok {
						return v.Int()
					}
					return -1
				}
				r := reqRec{
					pod: pod.Str(), start: c.since(sp.StartTimestamp()), end: c.since(sp.EndTimestamp()),
					e2e: f("gen_ai.latency.e2e"), ttft: f("gen_ai.latency.time_to_first_token"), queue: f("gen_ai.latency.time_in_queue"),
					prefill: f("gen_ai.latency.time_in_model_prefill"), decode: f("gen_ai.latency.time_in_model_decode"),
					prompt: i("gen_ai.usage.prompt_tokens"), completion: i("gen_ai.usage.completion_tokens"),
					cached: i("gen_ai.usage.cached_tokens"),
					failed: sp.Status().Code() == ptrace.StatusCodeError,
					sglang: strings.HasPrefix(sp.Name(), " Req "),
				}
				c.reqs = append(c.reqs, r)
			}
		}
	}
	return nil
}

func (c *capture) Metrics(_ context.Context, md pmetric.Metrics) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rm := range md.ResourceMetrics().All() {
		pod, _ := rm.Resource().Attributes().Get("k8s.pod.name")
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				var dps pmetric.NumberDataPointSlice
				if m.Type() == pmetric.MetricTypeHistogram {
					// Kept as its two moments, each bucket at its upper
					// bound: the token-weighted mean step is their
					// increases' ratio (enrich/normalize's reading).
					for _, hp := range m.Histogram().DataPoints().All() {
						var s1, s2 float64
						b := hp.ExplicitBounds().AsRaw()
						for i, n := range hp.BucketCounts().AsRaw() {
							le := 2 * b[len(b)-1]
							if i < len(b) {
								le = b[i]
							}
							s1 += float64(n) * le
							s2 += float64(n) * le * le
						}
						at := c.since(hp.Timestamp())
						c.points = append(c.points, pointRec{name: m.Name() + ":s1", key: pod.Str(), at: at, value: s1},
							pointRec{name: m.Name() + ":s2", key: pod.Str(), at: at, value: s2})
					}
					continue
				}
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					dps = m.Gauge().DataPoints()
				case pmetric.MetricTypeSum:
					dps = m.Sum().DataPoints()
				}
				for _, dp := range dps.All() {
					key := pod.Str()
					if h, ok := dp.Attributes().Get("Hostname"); ok {
						g, _ := dp.Attributes().Get("gpu")
						key = h.Str() + "/" + g.Str()
					}
					lbl, _ := dp.Attributes().Get("finished_reason")
					c.points = append(c.points, pointRec{name: m.Name(), key: key, label: lbl.Str(), at: c.since(dp.Timestamp()), value: dp.DoubleValue()})
				}
			}
		}
	}
	return nil
}

// runCapture runs cfg into a capture sink.
func runCapture(t testing.TB, cfg Config) (*capture, *Truth) {
	t.Helper()
	start := cfg.Start
	if start.IsZero() {
		start = DefaultStart()
	}
	c := newCapture(start)
	tr, err := Run(context.Background(), cfg, c)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return c, tr
}

// scenarioConfig is the default config running a built-in scenario for d.
func scenarioConfig(t testing.TB, name string, d time.Duration, seed uint64) Config {
	t.Helper()
	sc, err := LoadScenario(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Scenario = sc
	cfg.Duration = d
	cfg.Seed = seed
	return cfg
}

// window selects requests of pod (all pods if "") that started in [from, to).
func (c *capture) window(pod string, from, to time.Duration) []reqRec {
	var out []reqRec
	for _, r := range c.reqs {
		if (pod == "" || r.pod == pod) && r.start >= from && r.start < to {
			out = append(out, r)
		}
	}
	return out
}

func median(xs []float64) float64 {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func quantile(xs []float64, q float64) float64 {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

func field(rs []reqRec, f func(reqRec) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// series returns the points of metric name for key in [from, to).
func (c *capture) series(name, key string, from, to time.Duration) []pointRec {
	var out []pointRec
	for _, p := range c.points {
		if p.name == name && p.key == key && p.at >= from && p.at < to {
			out = append(out, p)
		}
	}
	return out
}

func values(ps []pointRec) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = p.value
	}
	return out
}

// increase is last − first of a counter series in [from, to).
func (c *capture) increase(name, key string, from, to time.Duration) float64 {
	ps := c.series(name, key, from, to)
	if len(ps) < 2 {
		return 0
	}
	var sum float64
	byLabel := map[string][]pointRec{}
	for _, p := range ps {
		byLabel[p.label] = append(byLabel[p.label], p)
	}
	for _, l := range sortedKeys(byLabel) {
		s := byLabel[l]
		sum += s[len(s)-1].value - s[0].value
	}
	return sum
}

// pods of a model in the default fleet.
func pods(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + "-" + itoa(i)
	}
	return out
}

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }
