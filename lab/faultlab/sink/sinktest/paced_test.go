package sinktest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tailcause/tailcause/lab/faultlab"
	"github.com/tailcause/tailcause/lab/faultlab/sink/sinktest"
)

// arrival is one batch as the paced sink's target saw it.
type arrival struct {
	kind     string
	newest   time.Time // newest timestamp in the batch
	received time.Time
}

type recorder struct {
	mu   sync.Mutex
	now  func() time.Time
	seen []arrival
}

func (r *recorder) Traces(_ context.Context, td ptrace.Traces) error {
	var newest pcommon.Timestamp
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		for j := 0; j < td.ResourceSpans().At(i).ScopeSpans().Len(); j++ {
			sp := td.ResourceSpans().At(i).ScopeSpans().At(j).Spans()
			for k := 0; k < sp.Len(); k++ {
				newest = max(newest, sp.At(k).EndTimestamp())
			}
		}
	}
	r.add("traces", newest)
	return nil
}

func (r *recorder) Metrics(_ context.Context, md pmetric.Metrics) error {
	var newest pcommon.Timestamp
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		for j := 0; j < md.ResourceMetrics().At(i).ScopeMetrics().Len(); j++ {
			ms := md.ResourceMetrics().At(i).ScopeMetrics().At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				var dps pmetric.NumberDataPointSlice
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					dps = m.Gauge().DataPoints()
				case pmetric.MetricTypeSum:
					dps = m.Sum().DataPoints()
				default:
					continue
				}
				for d := 0; d < dps.Len(); d++ {
					newest = max(newest, dps.At(d).Timestamp())
				}
			}
		}
	}
	r.add("metrics", newest)
	return nil
}

func (r *recorder) add(kind string, newest pcommon.Timestamp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	r.seen = append(r.seen, arrival{kind, newest.AsTime(), now()})
}

func spansEndingAt(ends ...time.Time) ptrace.Traces {
	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	for _, e := range ends {
		s := sp.AppendEmpty()
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(e.Add(-time.Second)))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(e))
	}
	return td
}

func gaugeAt(ts ...time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	dps := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints()
	for _, t := range ts {
		dps.AppendEmpty().SetTimestamp(pcommon.NewTimestampFromTime(t))
	}
	return md
}

// TestPacedHoldsEachBatchUntilItsTime: on a fake clock, a batch is held
// until its newest timestamp, a late one goes at once (and counts as
// behind), an empty one is not held, and a cancelled wait forwards nothing.
func TestPacedHoldsEachBatchUntilItsTime(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := t0
	var slept []time.Duration
	rec := &recorder{now: func() time.Time { return clock }}
	p := sinktest.NewPaced(rec)
	p.Now = func() time.Time { return clock }
	p.Sleep = func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		slept = append(slept, d)
		clock = clock.Add(d)
		return nil
	}
	ctx := context.Background()
	if err := p.Traces(ctx, spansEndingAt(t0.Add(time.Second), t0.Add(3*time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := p.Metrics(ctx, gaugeAt(t0.Add(2*time.Second), t0.Add(5*time.Second))); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(4 * time.Second) // the clock runs ahead: t0+9s
	if err := p.Traces(ctx, spansEndingAt(t0.Add(7*time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := p.Metrics(ctx, pmetric.NewMetrics()); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{3 * time.Second, 2 * time.Second}
	if len(slept) != len(want) || slept[0] != want[0] || slept[1] != want[1] {
		t.Fatalf("slept %v, want %v (each batch held until its newest timestamp)", slept, want)
	}
	if len(rec.seen) != 4 {
		t.Fatalf("forwarded %d batches, want 4", len(rec.seen))
	}
	for _, a := range rec.seen[:2] {
		if !a.received.Equal(a.newest) {
			t.Errorf("%s batch of %v forwarded at %v", a.kind, a.newest, a.received)
		}
	}
	st := p.Stats()
	if st.Behind != 2*time.Second || st.Worst != 2*time.Second || st.Held != 5*time.Second || !st.Last.Equal(t0.Add(7*time.Second)) {
		t.Errorf("stats %+v", st)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Traces(cctx, spansEndingAt(t0.Add(time.Minute))); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: err %v", err)
	}
	if len(rec.seen) != 4 {
		t.Errorf("a batch was forwarded after its wait was cancelled")
	}
}

// TestPacedFaultLabRealTime is the lab's real-time mode on the wall clock
// (about 3 s): with Start = now, every batch is forwarded no earlier than
// its newest timestamp and soon after it, and the run takes the simulated
// time.
func TestPacedFaultLabRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: 3 s")
	}
	cfg := faultlab.DefaultConfig()
	cfg.Fleet = faultlab.FleetSpec{
		Hosts: []faultlab.HostSpec{{Name: "node-1", GPU: "H100", GPUs: 2}},
		Models: []faultlab.ModelSpec{{Name: "llama-3.1-8b", Hosts: []string{"node-1"}, Engines: 2, TP: 1, Rate: 12,
			Workload: []faultlab.StreamSpec{{Trace: "azure-conv", Share: 1}}}},
	}
	cfg.Duration = 3 * time.Second
	cfg.Warmup = -1 // no warm-up: the first batch is due at once
	cfg.FlushInterval = 250 * time.Millisecond
	cfg.VLLMScrapeInterval = time.Second
	rec := &recorder{}
	p := sinktest.NewPaced(rec)
	start := time.Now()
	cfg.Start = start
	truth, err := faultlab.Run(context.Background(), cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if elapsed < 2500*time.Millisecond {
		t.Errorf("3 s simulated ran in %v of wall time: not paced", elapsed)
	}
	if truth.Stats.Requests == 0 || len(rec.seen) < 8 {
		t.Fatalf("%d requests in %d batches", truth.Stats.Requests, len(rec.seen))
	}
	for _, a := range rec.seen {
		if a.received.Before(a.newest) {
			t.Errorf("%s batch of %v forwarded %v early", a.kind, a.newest, a.newest.Sub(a.received))
		}
		if late := a.received.Sub(a.newest); late > time.Second {
			t.Errorf("%s batch of %v forwarded %v late", a.kind, a.newest, late)
		}
	}
	t.Logf("%d requests, %d batches in %v; pacing %+v", truth.Stats.Requests, len(rec.seen), elapsed, p.Stats())
}
