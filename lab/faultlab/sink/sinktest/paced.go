package sinktest

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tailcause/tailcause/lab/faultlab/sink"
)

// Paced runs the fault lab in real time: it holds each batch until the
// wall clock reaches the batch's simulated time (its newest span end or
// data point), then passes it to Next. With the run's Start set to the
// wall clock's now, the telemetry arrives as a live fleet's would: spans
// when requests end, scrapes when they are taken (at most the lab's
// FlushInterval late, as a Collector's batch processor sends them). The
// simulator calls its sink from one goroutine, so holding a batch holds
// the simulation: it never runs ahead of the clock.
//
// A batch whose time has already passed (the simulator computing its
// warm-up, or falling behind) goes at once; Behind reports how late the
// last one was.
type Paced struct {
	Next sink.Target
	// Now and Sleep default to the wall clock (tests replace them).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error

	mu     sync.Mutex
	held   time.Duration // total time batches were held
	behind time.Duration // lateness of the last batch (0 when it was held)
	worst  time.Duration // largest lateness after the first on-time batch
	onTime bool
	last   time.Time // simulated time of the last batch
}

// NewPaced paces next by the wall clock.
func NewPaced(next sink.Target) *Paced { return &Paced{Next: next} }

// Traces forwards td once the clock reaches its newest span end.
func (p *Paced) Traces(ctx context.Context, td ptrace.Traces) error {
	if err := p.wait(ctx, tracesTime(td)); err != nil {
		return err
	}
	return p.Next.Traces(ctx, td)
}

// Metrics forwards md once the clock reaches its newest data point.
func (p *Paced) Metrics(ctx context.Context, md pmetric.Metrics) error {
	if err := p.wait(ctx, metricsTime(md)); err != nil {
		return err
	}
	return p.Next.Metrics(ctx, md)
}

// PacedStats is what a paced run saw: the simulated time of the last
// batch, how late it was sent, the worst lateness once the run had caught
// up with the clock, and the total time batches were held.
type PacedStats struct {
	Last          time.Time
	Behind, Worst time.Duration
	Held          time.Duration
}

// Stats reports the pacing so far.
func (p *Paced) Stats() PacedStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PacedStats{Last: p.last, Behind: p.behind, Worst: p.worst, Held: p.held}
}

func (p *Paced) wait(ctx context.Context, at time.Time) error {
	if at.IsZero() {
		return nil // an empty batch has no time: nothing to hold it for
	}
	now := p.now()
	d := at.Sub(now)
	if d > 0 {
		if err := p.sleep(ctx, d); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if at.After(p.last) {
		p.last = at
	}
	if d > 0 {
		p.held += d
		p.behind = 0
		p.onTime = true
		return nil
	}
	p.behind = -d
	if p.onTime && -d > p.worst {
		p.worst = -d
	}
	return nil
}

func (p *Paced) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Paced) sleep(ctx context.Context, d time.Duration) error {
	if p.Sleep != nil {
		return p.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// tracesTime is the newest span end (or start) in td; zero when empty.
func tracesTime(td ptrace.Traces) time.Time {
	var newest pcommon.Timestamp
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				newest = max(newest, sp.StartTimestamp(), sp.EndTimestamp())
			}
		}
	}
	return stamp(newest)
}

// metricsTime is the newest data point time in md; zero when empty.
func metricsTime(md pmetric.Metrics) time.Time {
	var newest pcommon.Timestamp
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		sms := rms.At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				newest = max(newest, metricTime(ms.At(k)))
			}
		}
	}
	return stamp(newest)
}

func metricTime(m pmetric.Metric) pcommon.Timestamp {
	var newest pcommon.Timestamp
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		dps := m.Gauge().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			newest = max(newest, dps.At(i).Timestamp())
		}
	case pmetric.MetricTypeSum:
		dps := m.Sum().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			newest = max(newest, dps.At(i).Timestamp())
		}
	case pmetric.MetricTypeHistogram:
		dps := m.Histogram().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			newest = max(newest, dps.At(i).Timestamp())
		}
	case pmetric.MetricTypeExponentialHistogram:
		dps := m.ExponentialHistogram().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			newest = max(newest, dps.At(i).Timestamp())
		}
	case pmetric.MetricTypeSummary:
		dps := m.Summary().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			newest = max(newest, dps.At(i).Timestamp())
		}
	}
	return newest
}

func stamp(ts pcommon.Timestamp) time.Time {
	if ts == 0 {
		return time.Time{}
	}
	return ts.AsTime()
}
